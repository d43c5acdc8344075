"""N013 gdr-off: a node's side of the network hops runs without GPUDirect RDMA where its GPU-NIC path would allow it.

What it detects
    Each side of an inter-node NET hop (IB/RoCE, not sockets) says for itself whether it uses
    GPUDirect RDMA: the sender's ``[send] via NET/IB/0/GDRDMA`` and the receiver's ``[receive]
    via NET/IB/0`` are about two different nodes. The rule names the nodes whose sides lack
    ``/GDRDMA`` where nvidia-smi topo -m shows that GPU and NIC on one PCIe switch or host bridge
    (PIX, PXB, PHB), or where NCCL said why (``GPU Direct RDMA Disabled for HCA ... (no
    module)``: nvidia-peermem is not loaded). Without a topology it names, at lower
    confidence, the nodes whose sides lack GDR while other nodes' sides of the job have it.

Why it matters
    Without GPUDirect RDMA every message a node sends or receives is staged through its host
    memory: an extra copy over PCIe and the proxy thread's CPU time, which lowers the network
    bandwidth the rings get and adds latency -- on every hop that node takes part in.

What to do
    Load the peer-memory module on the named nodes (``modprobe nvidia-peermem``, or the
    nvidia_peermem / dmabuf support of the driver), check NCCL_NET_GDR_LEVEL is not set below
    the GPU-NIC distance, and that each GPU uses its nearest NIC (NCCL_IB_HCA, the NIC legend
    of topo -m). Confirm with NCCL_DEBUG=INFO that both sides of the hops print ``/GDRDMA``.

Known false positives
    GDR is rightly off when the NIC is far from the GPU: across the CPU interconnect (topo -m
    SYS) or across host bridges (NODE) NCCL disables it by design, and the rule stays quiet
    for those sides. Nodes using NICs at different distances give mixed GDR legitimately;
    without topo -m that case is only reported at low confidence.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.transports import gdr_gaps, no_module_hosts
from postmortem.parsers.base import among, groups_of
from postmortem.rules.network import transport_model as tm
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="N013", name="gdr-off", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

_STAGED = ("without GDR each message is staged through host memory (an extra copy over PCIe, the proxy thread's "
           "CPU)")


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    hops = f.hops
    if hops.is_empty():
        return []
    net = ctx.table("nccl_net")
    module = no_module_hosts(net)
    gaps = gdr_gaps(hops, f.topology, module)
    if gaps.is_empty():
        return []
    wanted = gaps.filter(pl.col("expected"))
    if wanted.is_empty():
        return []
    sides = _side_counts(hops)
    strong = wanted.filter(pl.col("reason").is_in(["close", "no module"]))
    out = []
    if not strong.is_empty():
        out.append(_strong(ctx, f, hops, strong, sides, net, module))
    weak = wanted.filter(pl.col("reason") == "others have it")
    if not strong.is_empty():
        weak = weak.filter(~pl.col("host").is_in(among(strong["host"].drop_nulls().unique())))
    if not weak.is_empty():
        out.append(_weak(ctx, f, hops, weak, sides))
    return out


def _side_counts(hops: pl.DataFrame) -> dict[str, tuple[int, int]]:
    """host -> (sides with GDR, sides without) over the inter-node RDMA hops."""
    out: dict[str, list[int]] = {}
    for h in hops.filter((pl.col("transport") == "NET") & ~pl.col("same_host").fill_null(False)
                         & (pl.col("tier").fill_null("") != "Socket")).iter_rows(named=True):
        for host, gdr in ((h["src_host"], h["send_gdr"]), (h["dst_host"], h["recv_gdr"])):
            if host is not None and gdr is not None:
                out.setdefault(host, [0, 0])[0 if gdr else 1] += 1
    return {k: (v[0], v[1]) for k, v in out.items()}


def _per_node(gaps: pl.DataFrame, sides: dict[str, tuple[int, int]]) -> list[str]:
    parts = []
    for (host,), rows in groups_of(gaps, "host", maintain_order=True):
        kinds = sorted(set(rows["side"].to_list()))
        nics = sorted(set(rows["nic"].drop_nulls().to_list()))
        paths = sorted(set(rows["path"].drop_nulls().to_list()))
        why = [f"topo -m GPU-NIC {'/'.join(paths)}"] if paths else []
        if "no module" in rows["reason"].to_list():
            why.append("NCCL: no module")
        on, off = sides.get(host, (0, rows.height))
        parts.append(f"{host or 'unknown host'}: {off} {'/'.join(kinds)} side(s) without GDR"
                     + (f" ({on} with)" if on else "") + (f" on {', '.join(nics[:4])}" if nics else "")
                     + (f" [{'; '.join(why)}]" if why else ""))
    return sorted(parts)


def _evidence_rows(hops: pl.DataFrame, gaps: pl.DataFrame) -> pl.DataFrame:
    """The hop line of each side that lacks GDR: the sender's line or the receiver's."""
    rows = hops.with_row_index("_hop").join(gaps.select("_hop", "side"), on="_hop", how="inner")
    return rows.select(input_id=pl.when(pl.col("side") == "receive").then(pl.col("recv_input_id")).otherwise(pl.col("input_id")),
                       line_no=pl.when(pl.col("side") == "receive").then(pl.col("recv_line_no")).otherwise(pl.col("line_no")))


def _strong(ctx, f, hops, gaps, sides, net, module) -> Finding:
    nodes = sorted(set(gaps["host"].drop_nulls().to_list()))
    close = gaps.filter(pl.col("reason") == "close")
    paths = sorted(set(close["path"].drop_nulls().to_list()))
    why = []
    if not close.is_empty():
        why.append(f"nvidia-smi topo -m puts their GPUs and NICs at {'/'.join(paths)}, close enough for GPUDirect RDMA")
    on_module = sorted(set(nodes) & module)
    if on_module:
        why.append(f"NCCL on {', '.join(on_module[:6])}: GPU Direct RDMA disabled (no module): nvidia-peermem is "
                   "not loaded")
    with_gdr = sorted(h for h, (on, _) in sides.items() if on and h not in nodes)
    message = (f"{gaps.height} side(s) of inter-node hops on {', '.join(nodes[:6])}{' ...' if len(nodes) > 6 else ''} "
               f"run without GPUDirect RDMA ({'; '.join(_per_node(gaps, sides)[:6])}): {'; '.join(why)}"
               + (f"; {', '.join(with_gdr[:6])} use GDR" if with_gdr else "") + f"; {_STAGED}")
    hop_rows = hops.with_row_index("_hop").join(gaps.select("_hop").unique(), on="_hop", how="semi")
    no_mod = _no_module_rows(net, nodes)
    evidence = (tm.evidence_of(ctx, _evidence_rows(hops, gaps), "this side of the hop lacks /GDRDMA", 2)
                + tm.evidence_of(ctx, no_mod, "NCCL's reason", 1))
    both = not close.is_empty() and bool(on_module)
    return RULE.finding(confidence=0.85 if both else 0.75,
                   title=f"GPUDirect RDMA off on {len(nodes)} node(s) where the GPU-NIC path allows it", message=message,
                   ranks=tm.global_ranks(f, hop_rows), nodes=nodes, evidence=evidence, suggestion=_SUGGESTION,
                   culprit=True,
                   details={"nodes": nodes, "sides_without_gdr": gaps.height, "hops_without_gdr": hop_rows.height,
                            "hops_with_gdr": int(hops["gdr"].fill_null(False).sum()), "paths": paths,
                            "no_module": bool(on_module), "nodes_with_gdr": with_gdr,
                            "per_node": _per_node(gaps, sides)})


def _weak(ctx, f, hops, gaps, sides) -> Finding:
    nodes = sorted(set(gaps["host"].drop_nulls().to_list()))
    nics = sorted(set(gaps["nic"].drop_nulls().to_list()))
    with_gdr = sorted(h for h, (on, _) in sides.items() if on and h not in nodes)
    hop_rows = hops.with_row_index("_hop").join(gaps.select("_hop").unique(), on="_hop", how="semi")
    message = (f"{gaps.height} side(s) of inter-node hops run without GPUDirect RDMA on {', '.join(nodes[:6]) or 'hosts unknown'}"
               f" ({'; '.join(_per_node(gaps, sides)[:6])}) while "
               + (f"{', '.join(with_gdr[:6])} use it" if with_gdr else "other sides of the job's hops use it")
               + f"{f' (NICs {chr(44).join(nics[:6])})' if nics else ''}: either those NICs are far from their GPUs "
               "(topo -m SYS or NODE: GDR off is then right) or GDR is unavailable there (nvidia-peermem not loaded, "
               f"NCCL_NET_GDR_LEVEL); the inputs hold no nvidia-smi topo -m to tell; {_STAGED}")
    with_rows = hops.filter(pl.col("gdr").fill_null(False))
    where = ", ".join(nodes[:3]) + (" ..." if len(nodes) > 3 else "") if nodes else "some nodes"
    return RULE.finding(confidence=0.35, title=f"GPUDirect RDMA off on {where} only",
                   message=message, ranks=tm.global_ranks(f, hop_rows), nodes=nodes,
                   evidence=tm.evidence_of(ctx, _evidence_rows(hops, gaps), "this side of the hop lacks /GDRDMA", 2)
                   + tm.evidence_of(ctx, with_rows, "a hop with /GDRDMA", 1),
                   suggestion="Collect nvidia-smi topo -m of these nodes to see the GPU-NIC distance; " + _SUGGESTION,
                   culprit=False,
                   details={"nodes": nodes, "sides_without_gdr": gaps.height, "hops_without_gdr": hop_rows.height,
                            "hops_with_gdr": with_rows.height, "nics": nics, "nodes_with_gdr": with_gdr,
                            "per_node": _per_node(gaps, sides)})


_SUGGESTION = ("Load the peer-memory module on these nodes (modprobe nvidia-peermem), check NCCL_NET_GDR_LEVEL is "
               "not set below the GPU-NIC distance and that each GPU uses its nearest NIC (NCCL_IB_HCA, topo -m NIC "
               "legend); confirm with NCCL_DEBUG=INFO that both sides of the hops print /GDRDMA.")


def _no_module_rows(net: pl.DataFrame, hosts: list[str]) -> pl.DataFrame:
    if net.is_empty() or not {"kind", "gdr", "detail", "host"} <= set(net.columns):
        return pl.DataFrame()
    return net.filter((pl.col("kind") == "gdr") & (pl.col("gdr") == "Disabled") & pl.col("host").is_in(hosts)
                      & pl.col("detail").fill_null("").str.contains("no module"))
