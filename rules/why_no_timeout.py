"""Why no timeout fired (or why it fired late): shared by the H rules, not a rule itself."""

from __future__ import annotations

import polars as pl

from rules.base import Context


def why_no_timeout(ctx: Context, hang) -> list[str]:
    reasons = []
    state = hang.pg
    if state is not None and hang.basis == "behind" and set(hang.culprits) <= set(state.idle):
        reasons.append("the culprit had nothing in flight (last enqueued == last completed): a watchdog only times "
                       "out work that was enqueued, so the culprit's own watchdog had nothing to fire on")
    timeouts = state.snapshot.filter(pl.col("timeout_seq").is_not_null()) if state is not None else pl.DataFrame()
    span = hang_span(ctx)
    if not timeouts.is_empty():
        ms = timeouts["timeout_ms"].drop_nulls()
        first = timeouts.sort("timeout_ts", nulls_last=True).row(0, named=True)
        reasons.append(
            f"the waiting ranks' watchdogs did fire after Timeout(ms)={int(ms.max()) if len(ms) else '?'} "
            f"(first: rank {first['rank']} at {first['timeout_ts']}); those timeouts are symptoms of the culprit")
    elif span:
        start, end = span
        hours = (end - start).total_seconds() / 3600
        configured = configured_timeout_s(ctx)
        if configured is not None and configured > (end - start).total_seconds():
            reasons.append(f"the job hung {hours:.1f} h (from {start} to the end of the logs at {end}) but the "
                           f"configured collective timeout is {configured / 60:.0f} min, so it never expired")
        else:
            reasons.append(f"no watchdog timeout appears although the job hung {hours:.1f} h (from {start} to the end "
                           f"of the logs at {end}); the timeout is not stated in the logs -- check "
                           "init_process_group(timeout=...) / --distributed-timeout-minutes and whether stderr was kept")
    return reasons


def hang_span(ctx: Context):
    """(last progress, end of logs) for the attempt, from timestamped rows."""
    last_progress = None
    iterations = ctx.table("iterations")
    if not iterations.is_empty() and "ts" in iterations.columns:
        last_progress = iterations["ts"].drop_nulls().max()
    ends = []
    for name in ("events", "collectives", "progress", "iterations", "exits", "slurm", "agent"):
        t = ctx.table(name)
        for column in ("ts", "time"):
            if column in t.columns and t.schema[column] == pl.Datetime("us"):
                value = t[column].drop_nulls().max()
                if value is not None:
                    ends.append(value)
    if last_progress is None or not ends:
        return None
    end = max(ends)
    return (last_progress, end) if end > last_progress else None


def configured_timeout_s(ctx: Context) -> float | None:
    settings = ctx.table("settings")
    if settings.is_empty():
        return None
    minutes = settings.filter(pl.col("key") == "distributed_timeout_minutes")["value"].cast(pl.Float64, strict=False).drop_nulls()
    return float(minutes[-1]) * 60 if len(minutes) else None
