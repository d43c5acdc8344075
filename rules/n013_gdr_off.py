"""N013 gdr-off: network hops without GPUDirect RDMA where the GPU-NIC path would allow it.

What it detects
    Inter-node NET hops (IB/RoCE, not sockets) whose connection lines lack ``/GDRDMA``, where
    nvidia-smi topo -m shows the GPU and the NIC the hop used on one PCIe switch or host
    bridge (PIX, PXB, PHB), or where NCCL said why (``GPU Direct RDMA Disabled for HCA ...
    (no module)``: nvidia-peermem is not loaded). Without a topology it reports, at low
    confidence, hops that lack GDR while other hops of the job have it (GDR on some hops only).

Why it matters
    Without GPUDirect RDMA every message is staged through host memory: an extra copy over
    PCIe on both sides and the proxy thread's CPU time, which lowers the network bandwidth
    the rings get and adds latency.

What to do
    Load the peer-memory module on the named nodes (``modprobe nvidia-peermem``, or the
    nvidia_peermem / dmabuf support of the driver), check NCCL_NET_GDR_LEVEL is not set below
    the GPU-NIC distance, and that each GPU uses its nearest NIC (NCCL_IB_HCA, the NIC legend
    of topo -m). Confirm with NCCL_DEBUG=INFO that the hops print ``/GDRDMA``.

Known false positives
    GDR is rightly off when the NIC is far from the GPU: across the CPU interconnect (topo -m
    SYS) or across host bridges (NODE) NCCL disables it by design, and the rule stays quiet
    for those hops. Different pods or nodes using NICs at different distances give mixed GDR
    legitimately; without topo -m that case is only reported as a low-confidence warning.
"""

from __future__ import annotations

import polars as pl

from rules import transport_model as tm
from rules.base import Context, Finding

CODE = "N013"
NAME = "gdr-off"
SEVERITY = "warning"


def check(ctx: Context) -> list[Finding]:
    f = tm.fabric(ctx)
    hops = f.hops
    if hops.is_empty():
        return []
    net = hops.filter((pl.col("transport") == "NET") & ~pl.col("same_host").fill_null(False)
                      & (pl.col("tier") != "Socket") & (pl.col("net").fill_null("") != "Socket"))
    off = net.filter(~pl.col("gdr").fill_null(False))
    if off.is_empty():
        return []
    on = net.height - off.height
    allowed, far, unknown = [], [], []
    for h in off.iter_rows(named=True):
        paths = [p for p in (f.nic_path(h["src_host"], h["src_gpu"], h["send_nic"]),
                             f.nic_path(h["dst_host"], h["dst_gpu"], h["recv_nic"])) if p]
        if any(p in tm.GDR_PATHS for p in paths):
            allowed.append({**h, "_path": next(p for p in paths if p in tm.GDR_PATHS)})
        elif paths:
            far.append(h)
        else:
            unknown.append(h)
    no_module = _no_module(ctx, tm.hosts(off))
    staged = ("without GDR each message is staged through host memory (an extra copy over PCIe on both sides, "
              "the proxy thread's CPU)")
    if allowed or (unknown and not no_module.is_empty()):
        rows = pl.DataFrame(allowed).drop("_path") if allowed else pl.DataFrame(unknown)
        nodes = sorted(set(rows["src_host"].drop_nulls().to_list()) | set(rows["dst_host"].drop_nulls().to_list()))
        paths = sorted({h["_path"] for h in allowed})
        why = []
        if allowed:
            why.append(f"nvidia-smi topo -m puts the GPU and its NIC at {'/'.join(paths)}, close enough for "
                       "GPUDirect RDMA")
        if not no_module.is_empty():
            why.append("NCCL: GPU Direct RDMA disabled (no module): nvidia-peermem is not loaded")
        message = (f"{rows.height} inter-node hop(s) on {', '.join(nodes[:6])} run without GPUDirect RDMA"
                   f"{f' ({on} other hop(s) have it)' if on else ''}: {'; '.join(why)}; {staged}")
        evidence = (tm.evidence_of(ctx, rows, "NET hop without /GDRDMA", 2)
                    + tm.evidence_of(ctx, no_module, "NCCL's reason", 1))
        ranks = tm.global_ranks(f, rows)
        return [Finding(CODE, NAME, SEVERITY, 0.85 if (allowed and not no_module.is_empty()) else 0.7,
                        f"GPUDirect RDMA off on {len(nodes)} node(s) where the GPU-NIC path allows it", message,
                        ranks=ranks, nodes=nodes, evidence=evidence, suggestion=_SUGGESTION, category="perf",
                        culprit=True, details={"hops_without_gdr": rows.height, "hops_with_gdr": on, "paths": paths,
                                               "no_module": not no_module.is_empty()})]
    if unknown and on:
        rows = pl.DataFrame(unknown)
        nodes = sorted(set(rows["src_host"].drop_nulls().to_list()) | set(rows["dst_host"].drop_nulls().to_list()))
        nics = sorted({n for n in rows["send_nic"].drop_nulls().to_list() + rows["recv_nic"].drop_nulls().to_list()})
        message = (f"GPUDirect RDMA on {on} inter-node hop(s) but off on {rows.height} "
                   f"({', '.join(nodes[:6]) or 'hosts unknown'}; NICs {', '.join(nics[:6]) or 'unknown'}): "
                   f"either those NICs are far from their GPUs (topo -m SYS or "
                   f"NODE: GDR off is then right) or GDR is unavailable there (nvidia-peermem not loaded, "
                   f"NCCL_NET_GDR_LEVEL); the inputs hold no nvidia-smi topo -m to tell; {staged}")
        return [Finding(CODE, NAME, SEVERITY, 0.35, "GPUDirect RDMA on some network hops only", message,
                        ranks=tm.global_ranks(f, rows), nodes=nodes,
                        evidence=tm.evidence_of(ctx, rows, "NET hop without /GDRDMA", 2)
                        + tm.evidence_of(ctx, net.filter(pl.col("gdr").fill_null(False)), "NET hop with /GDRDMA", 1),
                        suggestion=("Collect nvidia-smi topo -m of these nodes to see the GPU-NIC distance; "
                                    + _SUGGESTION),
                        category="perf", culprit=False,
                        details={"hops_without_gdr": rows.height, "hops_with_gdr": on, "nics": nics})]
    return []


_SUGGESTION = ("Load the peer-memory module on these nodes (modprobe nvidia-peermem), check NCCL_NET_GDR_LEVEL is "
               "not set below the GPU-NIC distance and that each GPU uses its nearest NIC (NCCL_IB_HCA, topo -m NIC "
               "legend); "
               "confirm with NCCL_DEBUG=INFO that the hops print /GDRDMA.")


def _no_module(ctx: Context, hosts: list[str]) -> pl.DataFrame:
    net = ctx.table("nccl_net")
    if net.is_empty() or "gdr" not in net.columns:
        return pl.DataFrame()
    rows = net.filter((pl.col("kind") == "gdr") & (pl.col("gdr") == "Disabled") & pl.col("host").is_in(hosts))
    if rows.is_empty() or "detail" not in rows.columns:
        return pl.DataFrame()
    return rows.filter(pl.col("detail").fill_null("").str.contains("no module"))
