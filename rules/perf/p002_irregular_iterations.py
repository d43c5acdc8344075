"""P002 irregular-iterations: training steps that took more than twice the median step, with what happened at the time.

What it detects
    Iterations (after the first two, validation rows excluded) whose elapsed time is more than
    2 x the median of the run's steps, and what else happened between the previous iteration
    line and this one: a checkpoint save, an evaluation, a garbage-collection or other
    framework line. Steps explained by a checkpoint save or an evaluation are info; steps that
    nothing in the logs explains are a warning.

Why it matters
    An unexplained slow step is a stall somewhere in the job (a storage hiccup, a host-side
    pause, Python GC, a straggler, a flapping link); several of them cost throughput and can
    precede a hang.

What to do
    Look at the node logs around the listed times (``postmortem query --db F "SELECT * FROM
    node_events ORDER BY ts_utc"``); if the steps coincide with checkpoints, save asynchronously
    (Megatron ``--async-save``, torch.distributed.checkpoint ``async_save``) or less often; for GC
    pauses, ``gc.freeze()`` after setup and a manual ``gc.collect()`` every N steps
    (Megatron ``--manual-gc --manual-gc-interval 100``).

Known false positives
    Frameworks that print an average over ``log_interval`` steps smooth single slow steps out;
    a schedule change (a new dataset phase, sequence-length warm-up) is slow by design. The
    first two steps are always excluded (compilation, allocator warm-up).
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.perf.perf_model import median, steady, train_steps

RULE = Rule(code="P002", name="irregular-iterations", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

RATIO = 2.0
EXPLAINING = {"checkpoint_save_start": "checkpoint save", "checkpoint_save_done": "checkpoint save",
              "gc": "garbage collection", "manual_gc": "garbage collection"}


def check(ctx: Context) -> list[Finding]:
    steps = train_steps(ctx)
    if steps.is_empty() or steps.height < 6 or "ts" not in steps.columns:
        return []
    run = steady(steps)
    med = median(run["elapsed_ms"].to_list())
    if not med:
        return []
    slow = run.filter(pl.col("elapsed_ms") > RATIO * med)
    if slow.is_empty():
        return []
    all_steps = ctx.table("iterations").filter(pl.col("ts").is_not_null()).sort("ts")
    events = ctx.table("events")
    explained, unexplained, evidence = [], [], []
    for row in slow.iter_rows(named=True):
        end = row["ts"]
        if end is None:
            continue
        earlier = pl.col("ts") < end
        if row["iteration"] is not None:
            earlier &= pl.col("iteration") < row["iteration"]
        before = all_steps.filter(earlier)
        start = before["ts"].max() if not before.is_empty() else None
        why = _why(events, all_steps, start, end, row)
        item = f"iteration {row['iteration']} ({row['elapsed_ms'] / 1000:.1f} s, {row['elapsed_ms'] / med:.1f}x)"
        if why:
            explained.append(f"{item}: {why}")
        else:
            unexplained.append(item)
        if len(evidence) < 4 and row.get("input_id") is not None:
            evidence.append(ctx.evidence(row["input_id"], row["line_no"], why or "nothing in the logs explains it"))
    severity = Severity.WARNING if unexplained else Severity.INFO
    parts = [f"{slow.height} of {run.height} steps took more than {RATIO:g} x the median {med / 1000:.1f} s"]
    if unexplained:
        parts.append("unexplained: " + ", ".join(unexplained[:8]) + (" ..." if len(unexplained) > 8 else ""))
    if explained:
        parts.append("explained: " + "; ".join(explained[:8]))
    lost = float((slow["elapsed_ms"] - med).sum()) / 1000
    parts.append(f"{lost:.0f} s lost against the median")
    return [RULE.finding(severity=severity, confidence=0.7 if unexplained else 0.8,
                    title=f"{slow.height} irregular step{'s' if slow.height > 1 else ''} (> {RATIO:g}x the median)",
                    message=". ".join(parts) + ".", evidence=evidence, details={"median_ms": med, "slow": slow.select("iteration", "elapsed_ms").to_dicts(),
                             "unexplained": len(unexplained)},
                    suggestion="" if not unexplained else
                    "Check node_events and storage around those times; for GC pauses use gc.freeze() and a manual "
                    "gc.collect() every N steps (Megatron --manual-gc --manual-gc-interval 100).")]


def _why(events: pl.DataFrame, steps: pl.DataFrame, start, end, row: dict) -> str:
    if start is not None and not events.is_empty() and "ts" in events.columns:
        window = events.filter(pl.col("ts").is_not_null() & (pl.col("ts") > start) & (pl.col("ts") <= end))
        kinds = [k for k in window["kind"].to_list() if k]
        for kind in kinds:
            if kind in EXPLAINING:
                return EXPLAINING[kind]
            if "checkpoint_save" in kind:
                return "checkpoint save"
            if "gc" in kind.split("_"):
                return "garbage collection"
    if start is not None and "validation" in steps.columns:
        evals = steps.filter(pl.col("validation").fill_null(False) & (pl.col("ts") > start) & (pl.col("ts") <= end))
        if not evals.is_empty():
            return "evaluation"
    return ""
