"""N012 sockets-despite-rdma: inter-node traffic on TCP sockets (a warning where RDMA NICs exist or were switched off).

What it detects
    Inter-node hops that run ``via NET/Socket`` (or processes of a multi-node job that chose
    ``Using network Socket``). Always a finding: a warning when the inputs show RDMA NICs
    anywhere in the job (ibstat / ibv_devinfo ports, the NIC legend of nvidia-smi topo -m,
    NCCL's ``NET/IB : Using`` list on other processes) or when NCCL was told to avoid them
    (``NCCL_IB_DISABLE=1``, ``NCCL_NET=Socket``: NCCL's "set by environment" line, an env dump
    or the job script, named with the nodes where it was set); information otherwise (hosts
    without RDMA NICs have nothing better). It names the cause the inputs show, including
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
    On hosts without RDMA NICs, sockets are the only transport: spread them over several
    interfaces or threads (NCCL_SOCKET_NTHREADS, NCCL_NSOCKS_PERTHREAD) if the network allows.

Known false positives
    Hosts without RDMA NICs (cloud VMs, a pod without the device) rightly use sockets: without
    RDMA NICs or a setting that turned them off in the inputs the finding is information only.
    Traffic carried by an external net plugin (``Using network IBext_v8``, ``AWS Libfabric``)
    is not on sockets, whatever ``NCCL_IB_DISABLE`` says (that variable only switches off
    NCCL's internal IB transport). A single-node job has no inter-node traffic: quiet.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist
from postmortem.rules.network import transport_model as tm
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N012", name="sockets-despite-rdma", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    procs = ctx.table("nccl_processes")
    socket_nodes: set[str] = set()
    if not procs.is_empty():
        socket_nodes |= set(procs.filter(pl.col("network") == "Socket")["host"].drop_nulls().to_list())
        # before 2.6 no `Using network` line: the socket transport's `NET/Socket : Using` list says it
        listed = with_columns(procs, socket_ifs=pl.List(pl.String)).filter(
            pl.col("network").is_null() & (pl.col("socket_ifs").list.len() > 0))
        socket_nodes |= set(listed["host"].drop_nulls().to_list())
    hops = f.hops
    socket_hops = pl.DataFrame()
    if not hops.is_empty():
        socket_hops = hops.filter((pl.col("tier") == "Socket") & ~pl.col("same_host").fill_null(False))
        socket_nodes |= set(tm.hosts(socket_hops))
    if not procs.is_empty():  # a process that chose a plugin or IB is not on sockets, whatever its hops' labels say
        chose = procs.filter(pl.col("network").is_not_null())
        rdma_procs = set(chose.filter(pl.col("network") != "Socket")["host"].to_list())
        socket_nodes -= rdma_procs - set(chose.filter(pl.col("network") == "Socket")["host"].to_list())
    if socket_hops.is_empty() and not _multi_node(ctx, procs):
        socket_nodes = set()   # one host: no inter-node traffic for sockets to carry
    if not socket_nodes:
        return []
    nics = _nic_evidence(ctx, f, procs, socket_nodes)
    nodes = sorted(socket_nodes)
    causes, cause_rows = _causes(ctx, nodes)
    switched_off = [c for c in causes if c.startswith(("NCCL_IB_DISABLE", "NCCL_NET"))]
    if not nics and not switched_off:
        return [_info(ctx, f, procs, nodes, socket_hops)]
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
    return [RULE.finding(confidence=0.85 if causes else 0.6,
                    title=f"inter-node traffic on sockets on {which} although RDMA NICs exist", message=message,
                    ranks=[], nodes=nodes, evidence=evidence, suggestion=suggestion, culprit=bool(causes),
                    details={"nodes": nodes, "causes": causes, "nic_evidence": list(nics), "nic_gbit": rate,
                             "socket_hops": socket_hops.height})]


def _nic_evidence(ctx: Context, f: tm.Fabric, procs: pl.DataFrame,
                  nodes: set[str]) -> dict[str, tuple[str, pl.DataFrame]]:
    out = {}
    if not f.ports.is_empty():
        rdma = f.ports.filter(pl.col("state").fill_null("Active").str.to_lowercase().str.contains("active"))
        if not rdma.is_empty():
            n = rdma.select("node", "ca", "port").unique().height
            mine = rdma.filter(pl.col("node").is_in(list(nodes)))
            layers = sorted({("RoCE" if (ll or "").lower() == "ethernet" else ll or "IB")
                             for ll in rdma["link_layer"].to_list()})
            where = "these nodes" if not mine.is_empty() else ", ".join(sorted(set(rdma["node"].to_list()))[:3])
            text = f"{n} active {'/'.join(layers)} port(s) in ibstat/ibv_devinfo of {where}"
            out[text] = ("RDMA NIC (ibstat/ibv_devinfo)", mine if not mine.is_empty() else rdma)
    legend = {n: names for n, names in f.nic_legend.items() if any(k.startswith("mlx") for k in names)}
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
            where = sorted(set((hits["node"] if "node" in hits.columns else hits["host"]).drop_nulls().to_list()))
            basis = sorted(set(hits["basis"].drop_nulls().to_list())) if "basis" in hits.columns else ["NCCL INFO"]
            causes.append(f"{key}={hits['value'][0]} set on {hostlist(where) if where else 'unknown nodes'} "
                          f"({', '.join(b for b in basis if b) or 'environment'})")
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


def _multi_node(ctx: Context, procs: pl.DataFrame) -> bool:
    """The job spans hosts: NCCL processes on several hosts, or ranks on several nodes."""
    hosts = set(procs["host"].drop_nulls().to_list()) if not procs.is_empty() else set()
    return len(hosts) > 1 or len(_job_nodes(ctx, procs)) > 1


def _info(ctx: Context, f: tm.Fabric, procs: pl.DataFrame, nodes: list[str], socket_hops: pl.DataFrame) -> Finding:
    """Sockets between hosts that show no RDMA NIC: the only transport they have; said, not blamed."""
    evidence = (tm.evidence_of(ctx, socket_hops, "inter-node hop via NET/Socket", 1) if not socket_hops.is_empty()
                else _network_lines(ctx, nodes))
    net = ctx.table("nccl_net")
    nodev = net.filter((pl.col("kind") == "ib_no_device") & pl.col("host").is_in(nodes)) \
        if not net.is_empty() and "kind" in net.columns else pl.DataFrame()
    evidence += tm.evidence_of(ctx, nodev, "NCCL sees no IB device", 1)
    cost = tm.price("Socket", f.acc).basis
    message = (f"inter-node traffic runs over TCP sockets on {len(nodes)} node(s) ({', '.join(nodes[:6])}"
               f"{' ...' if len(nodes) > 6 else ''}): {cost}; the inputs show no RDMA NIC on any node and no setting "
               "that switched RDMA off"
               + ("; NCCL found no IB device ('NET/IB : No device found')" if not nodev.is_empty() else ""))
    return RULE.finding(severity=Severity.INFO, confidence=0.5, title=f"inter-node traffic on TCP sockets on {len(nodes)} node(s)", message=message,
                   ranks=[], nodes=nodes, evidence=evidence,
                   suggestion=("If these nodes have RDMA NICs (ibstat, ibv_devinfo), give the processes the devices "
                               "(--device /dev/infiniband, rdma-core) so NCCL prints 'Using network IB'; otherwise "
                               "sockets are the only transport (NCCL_SOCKET_NTHREADS / NCCL_NSOCKS_PERTHREAD spread "
                               "them)."),
                   culprit=False,
                   details={"nodes": nodes, "causes": [], "nic_evidence": [], "socket_hops": socket_hops.height,
                            "rdma_seen": False})


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
