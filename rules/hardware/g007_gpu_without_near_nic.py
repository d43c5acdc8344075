"""G007 gpu-without-near-nic: GPUs with no NIC on their PCIe switch while the node's other GPUs have one.

What it detects
    In ``nvidia-smi topo -m`` of a node, the GPUs whose row shows no NIC at ``PIX`` or ``PXB``
    (same PCIe switch) while other GPUs of the same node have one (docs/formats/hardware.md section
    4: "GPU without a PIX/PXB NIC when other GPUs have one"); also the NICs that are ``SYS`` from
    every GPU (on the other CPU socket from all of them).

Why it matters
    NCCL gives each GPU the closest NIC. A GPU without a NIC on its switch sends through a host
    bridge or across the CPU interconnect: no GPUDirect RDMA by default (NCCL_NET_GDR_LEVEL),
    lower bandwidth, and every ring through that GPU's network hop runs at that speed. The
    usual cause is a NIC missing or in the wrong slot, or a NIC that is down.

What to do
    Check the node's NICs (ibstat: is one down or missing?) and its slot layout against the
    vendor's; compare with a healthy node's topo -m. NCCL_IB_HCA / NCCL_NET_GDR_LEVEL can
    adjust which NIC a GPU uses while the hardware is fixed.

Known false positives
    Systems built with fewer NICs than GPUs (one NIC per two GPUs, a PCIe-only workstation)
    have GPUs without a near NIC by design; a node where no GPU has one is not reported.
    Single-node jobs do not use the NICs: the finding is then information only.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hardware.hw_model import node_topology

RULE = Rule(code="G007", name="gpu-without-near-nic", severity=Severity.WARNING, category=Category.HARDWARE, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    topo = node_topology(ctx)
    if not topo.topo:
        return []
    hops = with_columns(ctx.table("nccl_hops"), transport=pl.String, same_host=pl.Boolean)
    multi = not hops.is_empty() and not hops.filter((pl.col("transport") == "NET")
                                                    & ~pl.col("same_host").fill_null(False)).is_empty()
    out = []
    for node in sorted(topo.topo):
        far, close = topo.gpus_without_close_nic(node)
        if not far or not close:
            continue
        nics = {b for _, b in topo.topo[node] if not b.startswith("GPU")}
        lonely = sorted(n for n in nics if all(topo.topo[node].get((g, n)) == "SYS" for g in far + close))
        paths = {g: sorted({topo.topo[node].get((g, n)) for n in nics} - {None}) for g in far}
        message = (f"on {node}, {', '.join(far)} have no NIC on their PCIe switch (PIX/PXB) while "
                   f"{', '.join(close)} have one; nearest for them: "
                   + "; ".join(f"{g} {'/'.join(p) or '?'}" for g, p in paths.items())
                   + (f"; NIC(s) {', '.join(lonely)} are SYS from every GPU" if lonely else "")
                   + ": their network traffic crosses a host bridge or the CPU interconnect, without GPUDirect RDMA"
                   + ("" if multi else "; the inputs show no inter-node NCCL hop, so it may not matter for this job"))
        line = topo.topo_line.get(node)
        out.append(RULE.finding(severity=RULE.severity if multi else Severity.INFO, confidence=0.6 if multi else 0.4,
                           title=f"{len(far)} GPU(s) on {node} without a NIC on their PCIe switch", message=message, nodes=[node],
                           evidence=[ctx.evidence(*line, note="nvidia-smi topo -m of this node")] if line else [],
                           suggestion=("Check the node's NICs (ibstat: one down or missing?) and slot layout against a "
                                       "healthy node's topo -m; NCCL_IB_HCA / NCCL_NET_GDR_LEVEL steer the NIC choice "
                                       "meanwhile."),
                           culprit=False,
                           details={"node": node, "gpus_without": far, "gpus_with": close, "lonely_nics": lonely,
                                    "drain": False}))
    return out
