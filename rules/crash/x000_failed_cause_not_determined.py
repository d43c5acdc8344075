"""X000 failed-cause-not-determined: the job failed or hung, and no rule could say why.

What it detects
    The job's outcome (``postmortem.analyzer.outcome``: decided from the evidence alone, before any rule)
    is ``failed`` or ``hung`` -- a launcher failure table, a non-zero exit or fatal signal, a
    scheduler failure state, an uncaught traceback, ``terminate called``, ``Fatal Python
    error``, a watchdog timeout, stack dumps of a stuck job -- but no other rule produced an
    error finding. This rule runs after the others (``FALLBACK``) and speaks only then.

Why it matters
    A failed job must never be reported healthy: an epilog files a "healthy" report away and
    nobody looks. Saying "failed, cause not determined" with each rank's first failure and
    last lines is the honest answer, and usually enough for a person to find the cause.

What to do
    Read the first failure of the earliest rank (the details list each rank's first failure in
    time order and its last lines); compare the ranks' last lines; enable the evidence the
    report lists as missing (py-spy dumps, Flight Recorder, NCCL_DEBUG=INFO) for the next run.

Known false positives
    A job whose logs hold a failure that it survived in a way the outcome cannot see (an error
    printed without a traceback by a process that then went on, with no progress line after
    it): the outcome counts it as a failure.
"""

from __future__ import annotations

from postmortem.analyzer.outcome import rank_tails
from postmortem.rules.base import Context, Evidence, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="X000", name="failed-cause-not-determined", severity=Severity.ERROR, category=Category.OUTCOME, since="0.1.0")
FALLBACK = True  # runs after every other rule; its finding is kept only when none of them found an error


def check(ctx: Context) -> list[Finding]:
    outcome = ctx.outcome
    if outcome["outcome"] not in ("failed", "hung"):
        return []
    tails = rank_tails(ctx.run, ctx.attempt)
    basis = outcome["basis"]
    first = basis[0]["what"] if basis else "no detail"
    title = f"the job {outcome['outcome']}, cause not determined"
    ranks_failed = [t for t in tails if t["first_failure"]]
    message = f"{first}"
    if ranks_failed:
        earliest = ranks_failed[0]
        message += (f"; the earliest rank to fail was rank {earliest['rank']}: "
                    f"{earliest['first_failure']['what']}")
    message += "; no rule recognised the cause: each rank's first failure and last lines are listed with the finding"
    evidence = [_evidence(ctx, b) for b in basis[:3] if b.get("input_id") is not None]
    for t in ranks_failed[:4]:
        f = t["first_failure"]
        if f.get("input_id") is not None and f.get("line") is not None:
            evidence.append(ctx.evidence(f["input_id"], f["line"], f"rank {t['rank']}'s first failure"))
    return [RULE.finding(confidence=0.5, title=title, message=message, evidence=[e for e in evidence if e],
                    details={"outcome": outcome["outcome"], "basis": basis, "ranks": tails},
                    suggestion=_suggestion(ctx))]


def _suggestion(ctx: Context) -> str:
    """Read the first failure; ask only for the evidence these inputs lack (postmortem.rules.evidence_model)."""
    from postmortem.rules import evidence_model

    keep = []
    if not evidence_model.has_stacks(ctx):
        keep.append("py-spy dumps")
    if evidence_model.flight_recorder(ctx)["dumps_read"] == 0:
        keep.append("Flight Recorder dumps")
    if not evidence_model.has_nccl_output(ctx) and not evidence_model.cpu_only(ctx):
        keep.append("NCCL_DEBUG=INFO output")
    more = f"; keep {evidence_model.phrase(keep)} for the next run" if keep else ""
    return f"Read the earliest rank's first failure and compare the ranks' last lines (details){more}."


def _evidence(ctx: Context, sign: dict) -> Evidence | None:
    return ctx.evidence(sign["input_id"], sign["line_no"], sign["what"])

