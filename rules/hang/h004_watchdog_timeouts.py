"""H004 watchdog-timeouts: collective timeouts, reported as the symptoms they are.

What it detects
    Ranks whose ProcessGroupNCCL watchdog (or blocking wait) timed out, the first one to
    do so, and the rank that sent the Flight Recorder dump signal.

Why it matters
    Responders often blame the first rank to time out, the first process torchrun saw exit
    ("Root Cause (first observed failure)"), or the rank named in "Received a dump signal
    ... from rank X". All three are symptoms; this finding lists them and links to the
    cause found by H001/H002/H003 when there is one.

What to do
    Follow ``caused_by``. Without a cause, enable Flight Recorder
    (TORCH_NCCL_TRACE_BUFFER_SIZE=2000, TORCH_NCCL_DUMP_ON_TIMEOUT=1) and keep every rank's stderr.

Known false positives
    None known; it only restates the timeout lines.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import rank_ranges
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.hang_model import pg_states

RULE = Rule(code="H004", name="watchdog-timeouts", severity=Severity.WARNING, category=Category.SYMPTOM, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    out = []
    for state in pg_states(ctx):
        if not state.timed_out:
            continue
        snap = state.snapshot.filter(pl.col("timeout_seq").is_not_null()).sort("timeout_ts", nulls_last=True)
        first = snap.row(0, named=True)
        detectors = _dump_senders(ctx)
        ms = snap["timeout_ms"].drop_nulls()
        message = (f"{len(state.timed_out)} rank(s) ({rank_ranges(state.timed_out)}) of {state.key} timed out in "
                   f"{state.majority_op or first['op']} #{state.wait_seq or first['timeout_seq']}"
                   + (f" after Timeout(ms)={int(ms.max())}" if len(ms) else "")
                   + f"; the first was rank {first['rank']}")
        if detectors:
            message += f"; the dump signal came from rank {rank_ranges(detectors)}"
        message += ". These ranks were waiting: they are symptoms, not the cause."
        evidence = [ctx.evidence(first["timeout_ref"]["input_id"], first["timeout_ref"]["line_no"],
                                 note="first timeout")]
        out.append(RULE.finding(confidence=0.95, title=f"watchdog timeouts on {len(state.timed_out)} rank(s) of {state.key}",
            message=message, ranks=[], evidence=evidence, suggestion="Do not drain the node of the first rank to time out; see the cause this finding links to.",
            details={"process_group": state.key, "timed_out_ranks": rank_ranges(state.timed_out),
                     "first_timeout_rank": first["rank"], "dump_signal_from": detectors}))
    return out


def _dump_senders(ctx: Context) -> list[int]:
    progress = ctx.table("progress")
    if progress.is_empty() or "detector_rank" not in progress.columns:
        return []
    return sorted(set(progress["detector_rank"].drop_nulls().to_list()))
