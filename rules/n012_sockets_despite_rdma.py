"""N012 sockets-despite-rdma: inter-node traffic on TCP sockets although the nodes have RDMA NICs.

What it detects
    Nodes whose NCCL processes chose ``Using network Socket`` (or whose inter-node hops run
    ``via NET/Socket``) while the inputs show RDMA NICs on them or in the job: ibstat /
    ibv_devinfo ports, the NIC legend of nvidia-smi topo -m, or NCCL's ``NET/IB : Using``
    list on other processes. It names the cause the inputs show: ``NCCL_IB_DISABLE=1`` (NCCL's
    "set by environment" line, or an env dump / job script), ``NCCL_NET=Socket``, or
    ``NET/IB : No device found`` / ``Failed to open libibverbs`` (the IB transport could not
    load: no /dev/infiniband in the container, no rdma-core).

Why it matters
    TCP sockets carry a few GB/s at most; each RDMA NIC carries its line rate (400 Gb/s
    RoCE = 50 GB/s) without the CPU. Every ring crossing a node runs at socket speed: the job
    trains, many times slower. A node on sockets while others use IB can also hang at init.

What to do
    Remove ``NCCL_IB_DISABLE=1`` (and ``NCCL_NET=Socket``) from the job script, the shell
    profile or the container image; when NCCL found no device, give the container the RDMA
    devices (``--device /dev/infiniband``, the RDMA shared device plugin on Kubernetes) and
    rdma-core/libibverbs; confirm with NCCL_DEBUG=INFO that it prints ``Using network IB``.

Known false positives
    Hosts without RDMA NICs (cloud VMs, a pod without the device) rightly use sockets: the rule
    stays quiet unless the inputs show RDMA NICs. Traffic carried by an external net plugin
    (``Using network IBext_v8``, ``AWS Libfabric``) is not on sockets, whatever
    ``NCCL_IB_DISABLE`` says (that variable only switches off NCCL's internal IB transport).
"""

from __future__ import annotations

import polars as pl

from rules import transport_model as tm
from rules.base import Context, Finding, with_columns

CODE = "N012"
NAME = "sockets-despite-rdma"
SEVERITY = "warning"


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    procs = ctx.table("nccl_processes")
    socket_nodes: set[str] = set()
    if not procs.is_empty():
        socket_nodes |= set(procs.filter(pl.col("network") == "Socket")["host"].drop_nulls().to_list())
    hops = f.hops
    socket_hops = pl.DataFrame()
    if not hops.is_empty():
        socket_hops = hops.filter((pl.col("tier") == "Socket") & ~pl.col("same_host").fill_null(False))
        socket_nodes |= set(tm.hosts(socket_hops))
    if not procs.is_empty():  # a process that chose a plugin or IB is not on sockets, whatever its hops' labels say
        chose = procs.filter(pl.col("network").is_not_null())
        rdma_procs = set(chose.filter(pl.col("network") != "Socket")["host"].to_list())
        socket_nodes -= rdma_procs - set(chose.filter(pl.col("network") == "Socket")["host"].to_list())
    if not socket_nodes:
        return []
    nics = _nic_evidence(ctx, f, procs, socket_nodes)
    if not nics:
        return []  # no RDMA NIC anywhere in the inputs: sockets are the only choice
    nodes = sorted(socket_nodes)
    causes, cause_rows = _causes(ctx, nodes)
    evidence = []
    for what, rows in cause_rows:
        evidence += tm.evidence_of(ctx, rows, what, 1)
    if not socket_hops.is_empty():
        evidence += tm.evidence_of(ctx, socket_hops, "inter-node hop via NET/Socket", 1)
    elif not procs.is_empty():
        evidence += _network_lines(ctx, nodes)
    for note, rows in nics.values():
        evidence += tm.evidence_of(ctx, rows, note, 1)
    rate = _rate(f, nodes)
    cost = tm.price("Socket", f.acc).basis
    if rate:
        cost += f"; each RDMA port would carry ~{rate / 8:g} GB/s per direction ({rate:g} Gb/s line rate)"
    all_nodes = _job_nodes(ctx, procs)
    which = "every node" if all_nodes and set(nodes) >= all_nodes else f"{len(nodes)} node(s)"
    message = (f"inter-node traffic runs over TCP sockets on {which} ({', '.join(nodes[:6])}"
               f"{' ...' if len(nodes) > 6 else ''}) although RDMA NICs exist ({'; '.join(k for k in nics)}): {cost}"
               + (f"; cause: {'; '.join(causes)}" if causes else "; the inputs do not show why NCCL chose sockets"))
    fix = []
    if any("NCCL_IB_DISABLE" in c for c in causes):
        fix.append("remove NCCL_IB_DISABLE=1 from the job script / shell profile / image")
    if any("NCCL_NET" in c for c in causes):
        fix.append("unset NCCL_NET=Socket")
    if any("device" in c or "libibverbs" in c for c in causes) or not causes:
        fix.append("give the containers the RDMA devices (--device /dev/infiniband, the RDMA device plugin) and "
                   "rdma-core/libibverbs")
    text = "; ".join(fix)
    suggestion = (text[:1].upper() + text[1:]
                  + "; then check NCCL_DEBUG=INFO prints 'Using network IB' and 'via NET/IB/…/GDRDMA'.")
    return [Finding(CODE, NAME, SEVERITY, 0.85 if causes else 0.6,
                    f"inter-node traffic on sockets on {which} although RDMA NICs exist", message,
                    ranks=[], nodes=nodes, evidence=evidence, suggestion=suggestion, category="perf",
                    culprit=bool(causes),
                    details={"nodes": nodes, "causes": causes, "nic_evidence": list(nics), "nic_gbit": rate,
                             "socket_hops": socket_hops.height})]


def _nic_evidence(ctx: Context, f: tm.Fabric, procs: pl.DataFrame,
                  nodes: set[str]) -> dict[str, tuple[str, pl.DataFrame]]:
    out = {}
    if not f.ports.is_empty():
        rdma = f.ports.filter(pl.col("state").fill_null("Active").str.to_lowercase().str.contains("active")
                              & pl.col("node").is_in(list(nodes)))
        if not rdma.is_empty():
            n = rdma.select("node", "ca", "port").unique().height
            layers = sorted({("RoCE" if (ll or "").lower() == "ethernet" else ll or "IB")
                             for ll in rdma["link_layer"].to_list()})
            text = f"{n} active {'/'.join(layers)} port(s) in ibstat/ibv_devinfo of these nodes"
            out[text] = ("RDMA NIC (ibstat/ibv_devinfo)", rdma)
    legend = {n: names for n, names in f.nic_legend.items() if n in nodes and any(k.startswith("mlx") for k in names)}
    if legend:
        rows = ctx.table("topo_nics")
        text = f"mlx5 NICs in nvidia-smi topo -m of {len(legend)} node(s)"
        out[text] = ("NIC legend of nvidia-smi topo -m", rows.head(1) if not rows.is_empty() else pl.DataFrame())
    if not procs.is_empty():
        ib = procs.filter((pl.col("network") != "Socket") & (pl.col("nics").list.len() > 0))
        if not ib.is_empty():
            hosts = sorted(set(ib["host"].to_list()))
            out[f"NCCL used RDMA NICs on {', '.join(hosts[:3])}"] = ("NCCL's NIC list on another node",
                                                                     _ib_lines(ctx, hosts))
    return out


def _ib_lines(ctx: Context, hosts: list[str]) -> pl.DataFrame:
    net = ctx.table("nccl_net")
    if net.is_empty():
        return pl.DataFrame()
    return net.filter((pl.col("kind") == "ib_nics") & pl.col("host").is_in(hosts))


def _causes(ctx: Context, nodes: list[str]) -> tuple[list[str], list[tuple[str, pl.DataFrame]]]:
    causes, rows = [], []
    env = ctx.table("env_nodes")
    value = pl.col("value").str.strip_chars()
    for key, bad in (("NCCL_IB_DISABLE", ~value.is_in(["0", ""])), ("NCCL_NET", value.str.to_lowercase() == "socket")):
        hits = pl.DataFrame()
        if not env.is_empty() and "key" in env.columns:
            hits = env.filter((pl.col("key") == key) & pl.col("node").is_in(nodes))
            hits = hits.filter(bad)
        if hits.is_empty():
            nccl = tm.env_settings(ctx, key)
            if not nccl.is_empty():
                hits = nccl.filter(pl.col("host").is_in(nodes) & bad)
        if not hits.is_empty():
            n = hits["node"].n_unique() if "node" in hits.columns else hits["host"].n_unique()
            basis = sorted(set(hits["basis"].to_list())) if "basis" in hits.columns else ["NCCL INFO"]
            causes.append(f"{key}={hits['value'][0]} on {n} node(s) ({', '.join(b for b in basis if b)})")
            rows.append((f"{key} set", hits))
    net = ctx.table("nccl_net")
    if not net.is_empty():
        nodev = net.filter((pl.col("kind") == "ib_no_device") & pl.col("host").is_in(nodes))
        if not nodev.is_empty():
            causes.append("NCCL found no IB device ('NET/IB : No device found'): the RDMA devices or libraries are "
                          "not visible to the processes")
            rows.append(("NCCL sees no IB device", nodev))
    events = with_columns(ctx.table("events"), host=pl.String)  # c10d's events carry no host
    if not events.is_empty() and "error_class" in events.columns:
        verbs = events.filter((pl.col("error_class") == "libibverbs_missing") & pl.col("host").is_in(nodes))
        if not verbs.is_empty():
            causes.append("libibverbs could not be opened (rdma-core missing in the image)")
            rows.append(("libibverbs missing", verbs))
    return causes, rows


def _network_lines(ctx: Context, nodes: list[str]):
    net = ctx.table("nccl_net")
    if net.is_empty():
        return []
    return tm.evidence_of(ctx, net.filter((pl.col("kind") == "network") & pl.col("host").is_in(nodes)),
                          "NCCL chose sockets", 1)


def _rate(f: tm.Fabric, nodes: list[str]) -> float | None:
    if f.ports.is_empty() or "rate_gbps" not in f.ports.columns:
        return None
    rates = f.ports.filter(pl.col("node").is_in(nodes))["rate_gbps"].drop_nulls()
    return float(rates.max()) if not rates.is_empty() else None


def _job_nodes(ctx: Context, procs: pl.DataFrame) -> set[str]:
    ranks = ctx.ranks
    if not ranks.is_empty() and "node" in ranks.columns:
        return set(ranks["node"].drop_nulls().to_list())
    return set(procs["host"].drop_nulls().to_list()) if not procs.is_empty() else set()
