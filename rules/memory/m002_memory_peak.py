"""M002 memory-peak: per-rank memory peaks near the card's capacity, or far apart between ranks.

What it detects
    The peak allocated and reserved memory of each rank from the framework's memory lines
    (Megatron ``memory (MB)``, DeepSpeed ``see_memory_usage``, torchtitan, Lightning) against
    the card's capacity (from the lines themselves, or the hardware model for the detected or
    ``--gpu`` GPU). It fires only above 95% of capacity, or when the largest rank peak is more
    than 1.3x the smallest. Samples taken before the optimizer state existed (Megatron's
    ``after 1 iterations`` line, DeepSpeed's ``Before initializing optimizer states``) are
    marked as understating the peak.

Why it matters
    A job above 95% fails on the next longer sequence, a resume, or a fragmented allocator; a
    rank far above the others (an uneven pipeline stage, an embedding or loss on one rank,
    an unbalanced expert) is the one that will run out first.

What to do
    Near the limit: set ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, recompute
    activations, or shard more (TP/PP, distributed optimizer). Uneven ranks: rebalance the
    pipeline stages (``--decoder-first-pipeline-num-layers``, account for embeddings) or the
    experts.

Known false positives
    A healthy, well-tuned job at 85-90% of the card (e.g. 85.6 GB on a 96 GB H20) is not a
    finding and stays quiet. Ranks of different roles (pipeline first/last stages) legitimately
    differ; with one sampled rank there is no spread to judge. Reserved memory counts the
    allocator's cache, so a reserved peak near capacity alone can be harmless.
"""

from __future__ import annotations

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.memory.memory_model import capacity_mib, gib, peaks

RULE = Rule(code="M002", name="memory-peak", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")
NEAR = 0.95
SPREAD = 1.3


def check(ctx: Context) -> list[Finding]:
    p = peaks(ctx)
    if p.is_empty():
        return []
    cap, cap_source = capacity_mib(ctx)
    rows = list(p.iter_rows(named=True))
    findings = []
    early = [r["rank"] for r in rows if r["all_early"]]
    note = (f"; the samples of rank(s) {', '.join(map(str, early))} were all taken before the optimizer state "
            "existed (first iteration / before optimizer init) and understate the peak") if early else ""
    if cap:
        near = [r for r in rows if max(r["peak_alloc"] or 0, r["peak_reserved"] or 0) >= NEAR * cap]
        if near:
            top = max(near, key=lambda r: max(r["peak_alloc"] or 0, r["peak_reserved"] or 0))
            value = max(top["peak_alloc"] or 0, top["peak_reserved"] or 0)
            findings.append(RULE.finding(confidence=0.7,
                title=f"memory peak {gib(value)} of {gib(cap)} ({100 * value / cap:.0f}%) on {len(near)} rank(s)",
                message=f"peak allocated {gib(top['peak_alloc'])}, reserved {gib(top['peak_reserved'])} on rank {top['rank']} "
                f"against {gib(cap)} ({cap_source}); above {NEAR:.0%} the next longer batch or a fragmented "
                f"allocator fails{note}",
                ranks=[r["rank"] for r in near], nodes=sorted({r["node"] for r in near if r["node"]}),
                evidence=[ctx.evidence(top["input_id"], top["line_no"], "the peak")],
                suggestion="PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, activation recompute, or more "
                           "sharding (TP/PP, distributed optimizer) before the next change in batch or sequence",
                details={"capacity_mib": cap, "peak_mib": value}))
    values = [r["peak_alloc"] for r in rows if r["peak_alloc"]]
    if len(values) >= 2 and max(values) > SPREAD * min(values):
        hi = max(rows, key=lambda r: r["peak_alloc"] or 0)
        lo = min((r for r in rows if r["peak_alloc"]), key=lambda r: r["peak_alloc"])
        findings.append(RULE.finding(confidence=0.5,
            title=f"memory peaks differ {max(values) / min(values):.1f}x between ranks",
            message=f"rank {hi['rank']} peaks at {gib(hi['peak_alloc'])}, rank {lo['rank']} at {gib(lo['peak_alloc'])}; "
            f"ranks of the same role should be within {SPREAD}x (different pipeline stages may differ by design)"
            f"{note}",
            ranks=[hi["rank"]], nodes=[hi["node"]] if hi["node"] else [],
            evidence=[ctx.evidence(hi["input_id"], hi["line_no"], "the highest peak"),
                      ctx.evidence(lo["input_id"], lo["line_no"], "the lowest peak")],
            suggestion="rebalance the pipeline stages or experts so the highest rank has headroom",
            details={"max_mib": max(values), "min_mib": min(values)}))
    return findings
