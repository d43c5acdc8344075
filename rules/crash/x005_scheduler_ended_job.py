"""X005 scheduler-ended-job: Slurm ended a running job at its time limit or preempted it; the job was not faulty.

What it detects
    ``slurmstepd: error: *** JOB N ON host CANCELLED AT ... DUE TO TIME LIMIT ***`` (or ``DUE TO
    PREEMPTION``), sacct / scontrol state ``TIMEOUT`` or ``PREEMPTED`` (``Reason=TimeLimit``),
    when nothing else ended the job: no rank had failed, no hang was found and training was
    still making progress shortly before the end.

Why it matters
    Every rank dies with SIGTERM (exit -15 / 143, Slurm ``0:15``) and the launcher prints
    failure tables, so the end looks like a crash. It is not one: nothing is wrong with the
    code or the nodes, and draining a node for it costs a node-day for nothing.

What to do
    Resume from the last complete checkpoint. Ask for a longer ``--time`` (or save checkpoints
    more often, before the limit: ``--signal=B:USR1@300`` lets the job save on a warning
    signal); for preemption, run in a partition/QoS without preemption or make the job
    requeue-safe (``--requeue`` with resume from checkpoint).

Known false positives
    A job that had hung long before the time limit: the time limit then only ended the hang.
    This rule stays quiet when a hang, an earlier failure of a rank, or a stall in training
    progress explains the end (the hang and crash rules report it).
"""

from __future__ import annotations

from datetime import timedelta

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.crash.crash_model import first_failure
from postmortem.rules.hang.hang_model import analyse_hang

RULE = Rule(code="X005", name="scheduler-ended-job", severity=Severity.ERROR, category=Category.EXTERNAL, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    hit = _ending(ctx)
    if hit is None:
        return []
    kind, when, evidence = hit
    first, _, _ = first_failure(ctx)
    if first is not None:
        return []                    # a rank failed on its own: that is the cause (X001)
    hang = analyse_hang(ctx)
    if hang.hang_states or hang.culprits:
        return []                    # a hung job that the limit ended: the hang is the cause
    stall = _stall(ctx, when)
    if stall is not None:
        return []                    # no progress long before the end: a silent hang, not the limit
    what = "its time limit" if kind == "time limit" else "preemption (a higher-priority job took the nodes)"
    message = (f"Slurm ended the job at {what}" + (f" at {when:%Y-%m-%d %H:%M:%S}" if when else "")
               + "; every rank was stopped with SIGTERM (exit -15 / 143, Slurm 0:15). The job was not faulty: "
               "no rank failed before it and no hang was found"
               + (" (training progressed until shortly before)" if _progressed(ctx) else "") + ". No drain.")
    suggestion = ("Resume from the last complete checkpoint; request a longer --time, or let the job save before the "
                  "limit (sbatch --signal=B:USR1@300 and a handler that checkpoints)." if kind == "time limit" else
                  "Resume from the last complete checkpoint; use a partition/QoS without preemption or make the job "
                  "requeue-safe (--requeue, resume from checkpoint).")
    return [RULE.finding(confidence=0.85, title=f"job ended by the scheduler: {kind}", message=message,
                    evidence=[ctx.evidence(i, n, note=note) for i, n, note in evidence[:2]], suggestion=suggestion,
                    culprit=True,
                    details={"kind": kind, "time": str(when) if when else None, "drain": False, "faulty": False})]


def _ending(ctx: Context):
    """(kind, time, evidence) of a time-limit or preemption end, from slurmstepd lines or the job record."""
    evidence, kind, when = [], None, None
    slurm = ctx.table("slurm")
    if not slurm.is_empty() and {"kind", "reason"} <= set(slurm.columns):
        rows = slurm.filter((pl.col("kind") == "cancelled") & pl.col("reason").fill_null("").str.contains(
            "TIME LIMIT|PREEMPT")).sort("input_id", "line_no")
        for row in rows.iter_rows(named=True):
            kind = kind or ("time limit" if "TIME" in row["reason"] else "preemption")
            when = when or row.get("ts")
            evidence.append((row["input_id"], row["line_no"], "slurmstepd's cancellation"))
    job = ctx.table("job")
    if not job.is_empty() and "state" in job.columns:
        rows = job.filter(pl.col("state").fill_null("").str.contains("^(TIMEOUT|PREEMPTED)")
                          | pl.col("reason").fill_null("").is_in(["TimeLimit", "Preempted"]))
        for row in rows.sort("input_id", "line_no").iter_rows(named=True):
            state = row.get("state") or ""
            kind = kind or ("preemption" if "PREEMPT" in state or row.get("reason") == "Preempted" else "time limit")
            when = when or row.get("end")
            evidence.append((row["input_id"], row["line_no"], f"the scheduler's record: {state}"))
    if kind is None:
        return None
    return kind, when, evidence


def _stall(ctx: Context, when) -> float | None:
    """Seconds without training progress before the end, when that is far longer than a step."""
    its = ctx.table("iterations")
    if when is None or its.is_empty() or "ts" not in its.columns:
        return None
    ts = its.filter(pl.col("ts").is_not_null()).sort("ts")["ts"]
    if ts.len() < 3:
        return None
    steps = ts.diff().drop_nulls().dt.total_seconds()
    step = float(steps.median() or 0.0)
    gap = (when - ts[-1]).total_seconds()
    return gap if gap > max(10 * step, 1800.0) and ts[-1] < when - timedelta(seconds=60) else None


def _progressed(ctx: Context) -> bool:
    its = ctx.table("iterations")
    return not its.is_empty() and "ts" in its.columns and its["ts"].drop_nulls().len() >= 3
