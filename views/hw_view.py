"""``postmortem hw FILE|FOLDER``: what the hardware tools' output said, and what it costs.

The parsed facts of a run's hardware inputs (``postmortem.parsers.hwtools``, ``postmortem.parsers.health``): GPUs
(name, bus id, memory, affinity, MIG mode), the ``nvidia-smi topo -m`` matrix per node (GPU
rows with their links, the NIC legend, GPUs without a near NIC), NIC ports with state, physical
state, rate and link layer (ibstat, ibv_devinfo, ibdev2netdev), iblinkinfo links,
nccl-tests results, CUDA samples' bandwidthTest and p2pBandwidthLatencyTest, perftest's ib_*_bw /
ib_*_lat (``postmortem.parsers.linkbench``), infiniband-diags' own warnings; and the prices the hardware model derives
from them: per port rate the bandwidth one NCCL hop over it can carry, per NVLink count the
tier, per GPU its nearest NIC. ``view`` returns a JSON-ready dict; ``render_text`` prints it.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import hardware, topology
from postmortem.parsers.base import groups_of


def _table(run, name: str) -> pl.DataFrame:
    return run.frame(f'SELECT * FROM "{name}"') if run.columns(name) else pl.DataFrame()


def _pick(frame: pl.DataFrame, cols: list[str]) -> list[dict]:
    if frame.is_empty():
        return []
    return frame.select([c for c in cols if c in frame.columns]).to_dicts()


def view(run, acc: dict | None = None) -> dict:
    gpus = _table(run, "gpus")
    health = _table(run, "gpu_health")
    ports = _table(run, "nic_ports")
    links = _table(run, "ib_links")
    bench = _table(run, "bench_results")
    events = _table(run, "events")
    topo = topology.from_run(run, keep_unknown=True)
    out = {
        "gpus": _pick(gpus.unique(["node", "gpu", "bus_id", "name", "source"], maintain_order=True) if not gpus.is_empty()
                      else gpus, ["node", "source", "gpu", "index", "name", "bus_id", "memory_total_mib", "cpu_affinity",
                                  "numa_affinity", "host", "rank"]),
        "gpu_health": _pick(health, ["node", "bus_id", "product", "mig_mode", "pcie_gen_cur", "pcie_gen_max",
                                     "pcie_width_cur", "pcie_width_max", "ecc_volatile_uncorrected", "state"]),
        "topology": _topology(topo),
        "nic_ports": _pick(ports, ["node", "source", "ca", "port", "state", "physical_state", "rate_gbps", "link_layer",
                                   "netdev", "ca_type", "vendor_part_id", "fw", "active_mtu"]),
        "ib_links": _pick(links, ["node", "device", "port", "width", "lane_gbps", "rate_gbps", "state", "physical_state",
                                  "peer"]),
        "nccl_tests": _bench(bench),
        "p2p": _p2p(_table(run, "p2p_matrix")),
        "host_device": _host_device(_table(run, "cuda_bandwidth")),
        "perftest": _perftest(_table(run, "perftest_results")),
        "tool_messages": _pick(events.filter(pl.col("kind").is_in(["ibpanic", "ibwarn", "iberror"]))
                               if not events.is_empty() and "kind" in events.columns else pl.DataFrame(),
                               ["node", "kind", "detail", "device"]),
    }
    out["prices"] = _prices(out, acc)
    return out


def _topology(topo: topology.Topology) -> list[dict]:
    out = []
    for node in sorted(topo.topo):
        cells = topo.topo[node]
        gpus = sorted({a for a, _ in cells if a.startswith("GPU")}, key=lambda g: int(g[3:]) if g[3:].isdigit() else 0)
        cols = sorted({b for _, b in cells}, key=lambda c: (not c.startswith("GPU"), len(c), c))
        far, _ = topo.gpus_without_close_nic(node)
        nics = {b for _, b in cells if not b.startswith("GPU")}
        nearest = {}
        for g in gpus:
            ranked = sorted(((cells.get((g, n)), n) for n in nics if cells.get((g, n))), key=lambda x: _RANK.get(x[0], 9))
            if ranked:
                nearest[g] = {"nic": ranked[0][1], "path": ranked[0][0]}
        out.append({"node": node, "columns": cols,
                    "rows": {g: [cells.get((g, c), "X" if c == g else None) for c in cols] for g in gpus},
                    "nic_legend": topo.nic_legend.get(node, {}), "gpus_without_near_nic": far, "nearest_nic": nearest})
    return out


_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


def _bench(bench: pl.DataFrame) -> list[dict]:
    if bench.is_empty() or "oop_busbw_gbs" not in bench.columns:
        return []
    return bench.group_by("op", maintain_order=True).agg(
        sizes=pl.len(), max_size_bytes=pl.col("size_bytes").max(), peak_busbw_gbs=pl.col("oop_busbw_gbs").max(),
        busbw_at_largest=pl.col("oop_busbw_gbs").sort_by("size_bytes").last()).to_dicts()


def _place(frame: pl.DataFrame) -> pl.Expr:
    return pl.col("node") if "node" in frame.columns else pl.lit(None, dtype=pl.String)


def _p2p(m: pl.DataFrame) -> list[dict]:
    """p2pBandwidthLatencyTest per node and run: the off-diagonal cells of each matrix (min, median,
    max, the slowest pair) and the pairs without P2P access."""
    if m.is_empty() or "matrix" not in m.columns:
        return []
    m = m.with_columns(_node=_place(m), _label=pl.concat_str([
        pl.col("matrix"), pl.lit(" "), pl.col("direction").fill_null(""), pl.lit(" P2P="), pl.col("p2p").fill_null(""),
        pl.lit(" "), pl.col("method").fill_null(""), pl.lit(" "), pl.col("side").fill_null(""), pl.lit(" "),
        pl.col("unit").fill_null("")]).str.replace_all(r"\s+", " ").str.strip_chars())
    off = m.filter((pl.col("src") != pl.col("dst")) & pl.col("matrix").is_in(["bandwidth", "latency"]))
    out = []
    for (node, run), rows in groups_of(m, "_node", "run", maintain_order=True):
        cells = off.filter((pl.col("_node").eq_missing(node)) & (pl.col("run") == run))
        matrices = []
        for (label,), c in groups_of(cells, "_label", maintain_order=True):
            worst = c.sort("value", descending=c["matrix"][0] == "latency").row(0, named=True)
            matrices.append({"matrix": label, "min": c["value"].min(), "median": c["value"].median(),
                             "max": c["value"].max(), "worst_pair": f"GPU{worst['src']}->GPU{worst['dst']}"})
        no_p2p = rows.filter(pl.col("matrix").is_in(["access", "connectivity"]) & (pl.col("value") == 0)
                             & (pl.col("src") != pl.col("dst")))
        out.append({"node": node, "gpus": int(rows["src"].n_unique()), "matrices": matrices,
                    "no_p2p": sorted({f"GPU{r['src']}->GPU{r['dst']}" for r in no_p2p.iter_rows(named=True)})})
    return out


def _host_device(bw: pl.DataFrame) -> list[dict]:
    """bandwidthTest per node, device, direction and memory: the best rate and at which size."""
    if bw.is_empty() or "gbyte_s" not in bw.columns:
        return []
    bw = bw.with_columns(_node=_place(bw))
    out = bw.sort("gbyte_s", descending=True).group_by("_node", "device", "direction", "memory", maintain_order=True).agg(
        device_name=pl.col("device_name").first(), best_gbyte_s=pl.col("gbyte_s").first(),
        at_bytes=pl.col("size_bytes").first(), sizes=pl.len(), mode=pl.col("mode").first())
    return out.rename({"_node": "node"}).sort("node", "device", "direction", "memory", nulls_last=True).to_dicts()


def _perftest(res: pl.DataFrame) -> list[dict]:
    """perftest per node, device and run: bandwidth runs' best average (Gb/s), latency runs' typical."""
    if res.is_empty() or "kind" not in res.columns:
        return []
    res = res.with_columns(_node=_place(res))
    out = []
    for (_node, _input, _run), rows in groups_of(res, "_node", "input_id", "run", maintain_order=True):
        first = rows.row(0, named=True)
        item = {k: first.get(k) for k in ("test", "device", "side", "link_type", "mtu", "gid_index", "bidirectional")}
        item["node"] = _node
        item["sizes"] = rows.height
        if first["kind"] == "bw":
            best = rows.sort("bw_avg_gbit", descending=True, nulls_last=True).row(0, named=True)
            item.update(best_avg_gbit=best["bw_avg_gbit"], at_bytes=best["size_bytes"], unit=best["unit"])
        else:
            typical = rows.sort("size_bytes").row(0, named=True)
            item.update(t_typical_us=typical.get("t_typical_us"), t_avg_us=typical.get("t_avg_us"),
                        at_bytes=typical["size_bytes"])
        out.append(item)
    return out


def _prices(v: dict, acc: dict | None) -> list[dict]:
    """What the hardware model makes of the facts: each port rate's bandwidth, each NVLink count's tier."""
    out = []
    seen = set()
    for p in v["nic_ports"]:
        rate, layer = p.get("rate_gbps"), p.get("link_layer")
        if not rate or (rate, layer) in seen:
            continue
        seen.add((rate, layer))
        kind = "RoCE" if (layer or "").lower() == "ethernet" else "IB"
        price = hardware.price_hop(f"{kind} GDR", acc, rate)
        out.append({"what": f"{kind} port at {rate:g} Gb/s", "gbyte_s": price.gbyte_s, "basis": price.basis})
    links = sorted({c for t in v["topology"] for row in t["rows"].values() for c in row if c and c.startswith("NV")})
    for link in links:
        n = int(link[2:]) if link[2:].isdigit() else None
        nvl = acc.get("nvlink") if acc else None
        if acc and nvl:
            price = hardware.price_hop("NVLink", acc)
            out.append({"what": f"{link} between GPUs ({n} NVLinks)", "gbyte_s": price.gbyte_s, "basis": price.basis})
        else:
            out.append({"what": f"{link} between GPUs ({n} NVLinks)", "gbyte_s": None,
                        "basis": "GPU model unknown: give --gpu MODEL to price it"})
    if acc and acc.get("pcie"):
        price = hardware.price_hop("SHM", acc)
        out.append({"what": "SHM (through host memory over PCIe)", "gbyte_s": price.gbyte_s, "basis": price.basis})
    return out


def _v(value) -> str:
    return "?" if value is None else str(value)


def _at(row: dict) -> str:
    return f"{row['node']} " if row.get("node") else ""


def render_text(v: dict) -> str:
    out = []
    if v["gpus"] or v["gpu_health"]:
        out.append("GPUs:")
        for g in v["gpus"][:64]:
            bits = [g.get("name"), g.get("bus_id"), f"{g['memory_total_mib']} MiB" if g.get("memory_total_mib") else None,
                    f"CPUs {g['cpu_affinity']}" if g.get("cpu_affinity") else None,
                    f"NUMA {g['numa_affinity']}" if g.get("numa_affinity") else None]
            out.append(f"  {_at(g)}{g.get('gpu') or '?'}: " + ", ".join(b for b in bits if b)
                       + f" ({g.get('source') or '?'})")
        for h in v["gpu_health"][:64]:
            bits = [h.get("product"), f"MIG {h['mig_mode']}" if h.get("mig_mode") else None,
                    f"PCIe Gen{h['pcie_gen_cur']} x{h['pcie_width_cur']}" if h.get("pcie_gen_cur") else None]
            out.append(f"  {_at(h)}{h.get('bus_id') or '?'}: " + ", ".join(b for b in bits if b)
                       + " (nvidia-smi -q)")
        out.append("")
    for t in v["topology"]:
        out.append(f"nvidia-smi topo -m of {t['node']}:")
        out.append("  " + " ".join(f"{c:>6s}" for c in ["", *t["columns"]]))
        for g, row in t["rows"].items():
            out.append("  " + " ".join(f"{c or '?':>6s}" for c in [g, *row]))
        if t["nic_legend"]:
            out.append("  NICs: " + ", ".join(f"{k} = {name}" for name, k in sorted(t["nic_legend"].items(),
                                                                                    key=lambda kv: kv[1])))
        if t["nearest_nic"]:
            out.append("  nearest NIC: " + ", ".join(f"{g} {n['nic']} ({n['path']})" for g, n in t["nearest_nic"].items()))
        if t["gpus_without_near_nic"]:
            out.append(f"  GPUs without a NIC on their PCIe switch: {', '.join(t['gpus_without_near_nic'])}")
        out.append("")
    if v["nic_ports"]:
        out.append("NIC ports:")
        for p in v["nic_ports"][:128]:
            state = p.get("state") or "?"
            if p.get("physical_state"):
                state += f"/{p['physical_state']}"
            rate = f", {p['rate_gbps']:g} Gb/s" if p.get("rate_gbps") else ""
            layer = f", {p['link_layer']}" if p.get("link_layer") else ""
            netdev = f", interface {p['netdev']}" if p.get("netdev") else ""
            kind = f", {p['ca_type'] or 'part ' + str(p['vendor_part_id'])}" if p.get("ca_type") or p.get("vendor_part_id") else ""
            out.append(f"  {_at(p)}{p['ca']}:{p.get('port') if p.get('port') is not None else '?'} "
                       f"{state}{rate}{layer}{netdev}{kind} ({p.get('source') or '?'})")
        out.append("")
    if v["ib_links"]:
        out.append("IB links (iblinkinfo):")
        for link in v["ib_links"][:64]:
            out.append(f"  {link.get('device') or '?'} port {_v(link.get('port'))}: {_v(link.get('width'))} x "
                       f"{_v(link.get('lane_gbps'))} Gbps = {link.get('rate_gbps') or 0:g} Gb/s "
                       f"{_v(link.get('state'))}/{_v(link.get('physical_state'))} -> {link.get('peer') or '?'}")
        out.append("")
    if v["nccl_tests"]:
        out.append("nccl-tests:")
        for b in v["nccl_tests"]:
            peak = f"{b['peak_busbw_gbs']:g}" if b.get("peak_busbw_gbs") is not None else "?"
            last = f"{b['busbw_at_largest']:g}" if b.get("busbw_at_largest") is not None else "?"
            out.append(f"  {b['op'] or '?'}: {b['sizes']} sizes up to {_v(b['max_size_bytes'])} B, peak busbw "
                       f"{peak} GB/s, {last} GB/s at the largest")
        out.append("")
    if v["p2p"]:
        out.append("p2pBandwidthLatencyTest (GPU pairs, off-diagonal cells):")
        for p in v["p2p"][:32]:
            out.append(f"  {_at(p)}{p['gpus']} GPUs" + (f", no P2P: {', '.join(p['no_p2p'][:16])}" if p["no_p2p"] else ""))
            for mtx in p["matrices"]:
                out.append(f"    {mtx['matrix']}: min {mtx['min']:g}, median {mtx['median']:g}, max {mtx['max']:g} "
                           f"(worst {mtx['worst_pair']})")
        out.append("")
    if v["host_device"]:
        out.append("bandwidthTest (host <-> device):")
        for b in v["host_device"][:64]:
            out.append(f"  {_at(b)}GPU {_v(b.get('device'))} {b.get('device_name') or ''} {_v(b['direction'])} "
                       f"{b.get('memory') or '?'}: {b['best_gbyte_s']:g} GB/s at {_v(b['at_bytes'])} B "
                       f"({b['sizes']} sizes, {b.get('mode') or '?'} mode)")
        out.append("")
    if v["perftest"]:
        out.append("perftest:")
        for p in v["perftest"][:64]:
            head = (f"  {_at(p)}{p.get('device') or '?'} {p.get('test') or '?'} ({p.get('side') or '?'} side, link "
                    f"{p.get('link_type') or '?'}, MTU {_v(p.get('mtu'))}, GID index {_v(p.get('gid_index'))})")
            if p.get("best_avg_gbit") is not None:
                per = " (both directions summed)" if p.get("bidirectional") else ""
                out.append(f"{head}: best average {p['best_avg_gbit']:.1f} Gb/s{per} at {_v(p['at_bytes'])} B, "
                           f"{p['sizes']} sizes")
            else:
                lat = p.get("t_typical_us") if p.get("t_typical_us") is not None else p.get("t_avg_us")
                out.append(f"{head}: {_v(lat)} us at {_v(p['at_bytes'])} B, {p['sizes']} sizes")
        out.append("")
    if v["tool_messages"]:
        out.append("tool messages:")
        out += [f"  {m['kind']}: {_v(m.get('detail'))}" for m in v["tool_messages"][:20]]
        out.append("")
    if v["prices"]:
        out.append("what the hardware model derives:")
        for p in v["prices"]:
            bw = f"~{p['gbyte_s']:g} GB/s per direction" if p["gbyte_s"] else "bandwidth unknown"
            out.append(f"  {p['what']}: {bw} ({p['basis']})")
        out.append("")
    if not out:
        return ("No hardware tool output parsed (nvidia-smi, topo -m, ibstat, ibv_devinfo, ibdev2netdev, iblinkinfo, "
                "bandwidthTest, p2pBandwidthLatencyTest, perftest).\n")
    return "\n".join(out)
