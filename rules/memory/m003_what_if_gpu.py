"""M003 what-if-gpu: would the observed memory peak fit another card (``report --what-if-gpu MODEL``)?

What it detects
    Only when the report is asked ``--what-if-gpu MODEL``: the largest per-rank peak (allocated,
    and reserved) against the other card's memory from the hardware model, with the shortfall
    and the levers that would close it, each with its cost: more tensor parallelism (memory
    divided by TP, more NVLink traffic per layer), activation recompute (about 33% more compute
    for the recomputed layers), optimizer offload (PCIe traffic every step), optimizer sharding
    (ZeRO / distributed optimizer: one more all-gather per step).

Why it matters
    Moving a job to a smaller card (96 GB H20 -> 80 GB H100) fails at the first step when the
    peak does not fit; knowing the gap before the move picks the right lever.

What to do
    Apply the cheapest lever that closes the gap plus 2-3 GB for the CUDA context, NCCL buffers
    and allocator headroom.

Known false positives
    Samples taken before the optimizer state existed understate the peak (the rule says so);
    reserved memory includes the allocator's cache, so the allocated peak is the firmer number.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.memory.memory_model import GIB, gib, peak_mib, peaks, target

RULE = Rule(code="M003", name="what-if-gpu", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")
HEADROOM_MIB = 2.5 * GIB      # CUDA context, NCCL buffers, allocator slack


def check(ctx: Context) -> list[Finding]:
    name = ctx.options.what_if_gpu
    if not name:
        return []
    acc = target(name)
    p = peaks(ctx)
    if acc is None or not acc.get("memory_gb"):
        return [RULE.finding(severity=Severity.INFO, confidence=0.3, title=f"--what-if-gpu {name}: not in the hardware model",
                        message=f"{name} is not in analyzer/hardware.toml; see `postmortem hw` for the known cards",
                        category=Category.INFO)]
    cap = float(acc["memory_gb"]) * GIB
    if p.is_empty():
        return [RULE.finding(severity=Severity.INFO, confidence=0.3, title=f"--what-if-gpu {acc['name']}: no memory samples",
                        message="the inputs have no per-rank memory lines to judge against "
                        f"{acc['memory_gb']} GB", category=Category.INFO)]
    alloc = float(p["peak_alloc"].max() or 0)
    reserved = float(p["peak_reserved"].max() or 0)
    peak = alloc or peak_mib(p)
    early = bool(p["all_early"].all())
    top = p.sort("peak_alloc", descending=True).row(0, named=True)
    short = peak + HEADROOM_MIB - cap
    fits = short <= 0
    levers = ("levers: tensor parallelism x2 (parameter/activation memory / TP; costs NVLink traffic on every "
              "layer, keep TP inside a node), activation recompute (frees most activation memory; costs about 33% "
              "more compute on the recomputed layers), optimizer offload to CPU (frees 12 bytes per parameter; "
              "costs PCIe traffic every step), distributed optimizer / ZeRO-1/2 sharding (optimizer state / DP; "
              "one more all-gather per step)")
    message = (f"observed peak {gib(alloc)} allocated, {gib(reserved)} reserved (rank {top['rank']}) against "
               f"{acc['name']}'s {acc['memory_gb']} GB")
    if fits:
        message += f": fits with {gib(-short)} to spare after {gib(HEADROOM_MIB)} of context/allocator headroom"
    else:
        message += (f": does not fit, short by {gib(peak - cap)} plus {gib(HEADROOM_MIB)} of CUDA context/NCCL/"
                    f"allocator headroom ({gib(short)} in all); {levers}")
    if early:
        message += "; the samples predate the optimizer state and understate the peak"
    return [RULE.finding(severity=Severity.INFO if fits else Severity.WARNING, confidence=0.6,
                    title=f"what if {acc['name']}: peak {gib(peak)} " + ("fits" if fits else f"does not fit {acc['memory_gb']} GB"),
                    message=message, ranks=[top["rank"]], nodes=[top["node"]] if top["node"] else [],
                    evidence=[ctx.evidence(top["input_id"], top["line_no"], "the observed peak")],
                    suggestion="" if fits else levers, details={"target": acc["name"], "capacity_mib": cap, "peak_mib": peak,
                             "short_mib": max(short, 0.0), "fits": fits})]
