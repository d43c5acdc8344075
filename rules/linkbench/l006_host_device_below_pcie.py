"""L006 host-device-below-pcie: bandwidthTest's pinned host<->device copies run far below the card's PCIe generation.

What it detects
    CUDA samples' ``bandwidthTest`` (``cuda_bandwidth``), per host, run and direction: the best
    pinned Host to Device and Device to Host bandwidth (sizes of 1 MB and up; all sizes when none
    is that large) against what the card's PCIe generation carries at x16 (``analyzer/hardware.toml``:
    about 26 GB/s achievable on Gen4, 50 on Gen5). It fires below half of that, with both numbers.
    The GPU model comes from the test's own ``Device N:`` line, else the host's ``gpus`` rows.

Why it matters
    A GPU whose PCIe link trained at a lower width or generation (x8, Gen3) or that copies through
    the far CPU socket slows everything that crosses PCIe: data loading, offload, checkpoints, and
    NCCL's SHM and non-GDR network hops.

What to do
    ``nvidia-smi -q -d PCIE`` (current vs max generation and width; G002 judges it when that output
    is there), ``lspci -vv`` LnkSta of the GPU and of the switch above it, reseat or replace a riser;
    rerun pinned to the GPU's NUMA node (``numactl -N <node> -m <node> bandwidthTest``): a copy from
    the far socket runs at a fraction of the rate.

Known false positives
    Pageable copies are slower by design and are not judged. A GPU that idles at a lower PCIe
    generation ramps up under load; bandwidthTest does load it. Device to device copies measure
    HBM, not PCIe, and are not judged. An unknown GPU model leaves the rule quiet.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.linkbench import linkbench_model as lm
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="L006", name="host-device-below-pcie", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

SHORT = 0.5
LARGE = 1 << 20


def check(ctx: Context) -> list[Finding]:
    bw = ctx.table("cuda_bandwidth")
    if bw.is_empty():
        return []
    bw = with_columns(lm.placed(ctx, bw), memory=pl.String, device_name=pl.String, device=pl.Int64)
    bw = bw.filter(pl.col("direction").is_in(["H2D", "D2H"]) & (pl.col("memory").fill_null("pinned") == "pinned")
                   & pl.col("gbyte_s").is_not_null())
    out = []
    for (place, input_id, run), rows in groups_of(bw, "place", "input_id", "run", maintain_order=True):
        acc = lm.accelerator(ctx, place, rows["device_name"].drop_nulls().to_list())
        expected, basis, gen = lm.pcie_expected(acc)
        if not expected:
            continue
        low = []
        for (direction,), d in groups_of(rows, "direction", maintain_order=True):
            large = d.filter(pl.col("size_bytes") >= LARGE)
            best = (large if not large.is_empty() else d).sort("gbyte_s", descending=True).row(0, named=True)
            if best["gbyte_s"] < SHORT * expected:
                low.append(best)
        if not low:
            continue
        node = rows["node"].drop_nulls().first()
        dev = low[0]["device"]
        shown = "; ".join(f"{r['direction']} {r['gbyte_s']:g} GB/s at {r['size_bytes']} B" for r in low)
        msg = (f"pinned copies on {place or '?'} GPU {dev if dev is not None else '?'}: {shown}, below half of the "
               f"~{expected:g} GB/s expected ({basis}): the GPU's PCIe link is degraded (width or generation) or the "
               f"test ran on the far CPU socket.")
        out.append(RULE.finding(confidence=0.65,
                           title=f"host<->device bandwidth {min(r['gbyte_s'] for r in low):g} GB/s on {place or '?'}, "
                           f"below {gen or 'PCIe'} (~{expected:g} GB/s)", message=msg,
                           nodes=[node] if node else [], gpus=[{"node": node, "cuda_dev": dev}] if dev is not None else [],
                           evidence=[ctx.evidence(r["input_id"], r["line_no"], f"{r['direction']}: {r['gbyte_s']:g} GB/s")
                                     for r in low],
                           suggestion=("nvidia-smi -q -d PCIE (current vs max gen/width), lspci -vv LnkSta; rerun with "
                                       "numactl -N <gpu's NUMA node> -m <node> bandwidthTest --memory=pinned."),
                           details={"place": place, "expected_gbs": expected, "pcie": gen,
                                    "measured": {r["direction"]: r["gbyte_s"] for r in low}}))
    return out
