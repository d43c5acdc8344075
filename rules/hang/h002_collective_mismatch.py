"""H002 collective-mismatch: ranks in the same collective sequence with a different op or size.

What it detects
    Within one process group, ranks waiting at the same SeqNum where a minority names a
    different OpType or NumelIn in its WorkNCCL descriptor (or, with
    ``TORCH_DISTRIBUTED_DEBUG=DETAIL``, a minority CollectiveFingerPrint at one
    SequenceNumber). The minority is the culprit, not the rank named as "but Rank X".

Why it matters
    NCCL does not check that ranks agree: a different op or size at one sequence number
    hangs or corrupts data. It is a rank-dependent code path (a different model branch, an
    uneven split, a skipped parameter).

What to do
    Find why the minority took a different path at that step (data-dependent branches,
    unused parameters, uneven batches) and make every rank issue identical collectives.

Known false positives
    All-gather/reduce-scatter NumelOut legitimately differs from NumelIn; only NumelIn and
    OpType are compared, and only OpType for all-to-all and scatter (uneven splits, a scatter's
    non-root ranks). COALESCED work counts as a collective only when shaped like a coalesced
    all-gather or reduce-scatter (NumelOut a whole multiple of NumelIn, or the reverse).
    With as many ranks on each side (two ranks, or only a few ranks' logs kept) there is no
    majority: the finding names the mismatch and no culprit.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import rank_ranges
from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.hang_model import pg_states

RULE = Rule(code="H002", name="collective-mismatch", severity=Severity.ERROR, category=Category.DESYNC, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    findings = []
    for state in pg_states(ctx):
        if not state.mismatched:
            continue
        if len(state.mismatched) >= len(state.waiting) / 2:
            findings.append(_no_majority(ctx, state))
            continue
        snap = state.snapshot.filter(pl.col("rank").is_in(state.mismatched))
        seen = ", ".join(f"rank {r}: {op} NumelIn={n}"
                         for r, op, n in snap.select("rank", "op", "numel_in").iter_rows())
        evidence = [ctx.evidence(ref["input_id"], ref["line_no"], note="minority descriptor")
                    for ref in snap["timeout_ref"].drop_nulls().to_list()[:3]]
        majority = state.snapshot.filter(pl.col("rank").is_in(state.waiting) & ~pl.col("rank").is_in(state.mismatched))
        evidence += [ctx.evidence(ref["input_id"], ref["line_no"], note="majority descriptor")
                     for ref in majority["timeout_ref"].drop_nulls().to_list()[:1]]
        gpus = [ctx.gpu_of(r) for r in state.mismatched]
        findings.append(RULE.finding(confidence=0.85,
            title=f"rank {rank_ranges(state.mismatched)} ran a different collective at SeqNum {state.wait_seq} ({state.key})",
            message=f"{len(state.waiting) - len(state.mismatched)} rank(s) of {state.key} are in {state.majority_op} "
            f"NumelIn={state.majority_numel} at SeqNum {state.wait_seq}; {seen}",
            ranks=state.mismatched, nodes=sorted({g.get("node") for g in gpus if g.get("node")}), gpus=gpus,
            evidence=evidence, culprit=True,
            suggestion="The minority took a different code path at this step (a data-dependent branch, unused "
                       "parameters, an uneven split). Make every rank issue the same collectives with the same sizes.",
            details={"process_group": state.key, "seq": state.wait_seq, "op": state.majority_op,
                     "numel_in": state.majority_numel}))
    findings += _fingerprints(ctx)
    return findings


def _no_majority(ctx: Context, state) -> Finding:
    """Ranks at one SeqNum with different descriptors and no side larger than the other (often
    only a few ranks' logs were kept): a mismatch, with no culprit to name."""
    snap = state.snapshot.filter(pl.col("rank").is_in(state.waiting))
    seen = "; ".join(f"rank {r}: {op} NumelIn={n}" for r, op, n in snap.select("rank", "op", "numel_in").iter_rows())
    evidence = [ctx.evidence(ref["input_id"], ref["line_no"], note="this rank's descriptor")
                for ref in snap["timeout_ref"].drop_nulls().to_list()[:4]]
    return RULE.finding(confidence=0.5,
        title=f"ranks of {state.key} disagree on the collective at SeqNum {state.wait_seq}",
        message=f"{seen}: the same sequence number with different sizes or ops is a collective mismatch (a rank-dependent "
        "code path or shape, not the network); with no majority the logs do not say which side took the wrong path",
        evidence=evidence, culprit=False,
        suggestion="Find why these ranks built different tensors for this collective (an uneven shard or split, a "
                   "rank-dependent model branch); TORCH_DISTRIBUTED_DEBUG=DETAIL names the mismatch at its first "
                   "occurrence.",
        details={"process_group": state.key, "seq": state.wait_seq})


def _fingerprints(ctx: Context) -> list[Finding]:
    colls = ctx.table("collectives")
    if colls.is_empty() or not {"kind", "seq", "pg_rank", "op", "numel_in"} <= set(colls.columns):
        return []
    fps = colls.filter(pl.col("kind") == "fingerprint")
    out = []
    for (seq,), rows in groups_of(fps, "seq", maintain_order=True):
        per_rank = rows.unique(["pg_rank"], keep="first").select("pg_rank", "op", "numel_in")
        # Ties (as many ranks on each side) in rank order, so the report reads the same on every run.
        variants = (per_rank.group_by("op", "numel_in").agg(ranks=pl.col("pg_rank").sort())
                    .sort(pl.col("ranks").list.len(), pl.col("ranks").list.first()))
        if len(variants) < 2:
            continue
        minority = variants.row(0, named=True)
        majority = variants.row(len(variants) - 1, named=True)
        decided = len(minority["ranks"]) < len(majority["ranks"])
        ref = rows.row(0, named=True)
        # Undecided is still an error (the job failed on it), but it names no culprit.
        out.append(RULE.finding(confidence=0.8 if decided else 0.3,
            title=f"collective mismatch at SequenceNumber {seq}: the ranks' fingerprints differ",
            message=f"{minority['op']} with {minority['numel_in']} elements on rank(s) {rank_ranges(minority['ranks'])} vs "
            f"{majority['op']} with {majority['numel_in']} elements on rank(s) {rank_ranges(majority['ranks'])}"
            + ("" if decided else "; with as many ranks on each side there is no majority to blame: one side took "
               "a rank-dependent code path (a different batch shape or model branch), and the logs do not say which"),
            ranks=sorted(minority["ranks"]) if decided else [],
            evidence=[ctx.evidence(ref["input_id"], ref["line_no"])], culprit=decided,
            suggestion="Ranks reached this collective with different tensors: find the rank-dependent model path.",
            details={"seq": seq}))
    return out
