"""Why no timeout fired (or why it fired late): shared by the H rules, not a rule itself.

Reasons it gives: the culprit had nothing in flight (its own watchdog had nothing to time out);
the waiting ranks' watchdogs did fire (then the timeouts are symptoms); the configured timeout
outlasts the hang, or was raised far above the default; ``TORCH_NCCL_ASYNC_ERROR_HANDLING=0``
(timeouts logged, not acted on), ``TORCH_NCCL_ENABLE_MONITORING=0`` (no heartbeat monitor);
and the blocking call ran outside ProcessGroupNCCL: DeepEP/NVSHMEM frames, a gloo group, a
host-side ``.item()`` / ``cudaStreamSynchronize`` in py-spy or faulthandler stacks.
"""

from __future__ import annotations

import functools
import operator

import polars as pl

from postmortem.analyzer.timeline import log_end
from postmortem.rules.base import Context


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
        # A watchdog line without a time stamp (no glog prefix) gives no "at": say none rather than "at None".
        when = f" at {first['timeout_ts']}" if first["timeout_ts"] is not None else ""
        reasons.append(
            f"the waiting ranks' watchdogs did fire after Timeout(ms)={int(ms.max()) if len(ms) else '?'} "
            f"(first: rank {first['rank']}{when}); those timeouts are symptoms of the culprit")
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
                           "init_process_group(timeout=...) / --distributed-timeout-minutes and whether stderr was "
                           "kept")
    reasons += _settings_reasons(ctx, timeouts)
    if timeouts.is_empty():
        # Where watchdogs fired, a waiting rank blocked in a host sync is just waiting on the
        # collective's kernel, not a call outside the watchdog's reach.
        reasons += _outside_pg_nccl(ctx, hang)
    return reasons


# Variables that silence or defang the watchdog (docs/formats/pytorch-failures.md, section 11).
_ENV_REASONS = {
    ("TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"): (
        {"0"}, "{k}={v}: async error handling is off, so a watchdog timeout is logged but the process is not "
               "aborted -- the job keeps hanging"),
    ("TORCH_NCCL_ENABLE_MONITORING",): (
        {"0"}, "{k}={v}: the heartbeat monitor is off, so a watchdog that is itself stuck (in a CUDA call) never "
               "kills the process"),
    ("TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"): (
        {"1"}, "{k}={v}: the timeout is raised in the calling thread only when it waits on the work"),
}
_RAISED_TIMEOUT_MS = 30 * 60 * 1000


def _env_value(ctx: Context, keys: tuple[str, ...]):
    for table in ("env_nodes", "env", "nccl_env"):
        t = ctx.table(table)
        if t.is_empty() or not {"key", "value"} <= set(t.columns):
            continue
        # the first row of the keys, found by Series work (a query per table costs more)
        names = t["key"].cast(pl.String)
        hit = functools.reduce(operator.or_, (names == key for key in keys))
        if hit.any():
            row = t.row(hit.arg_max(), named=True)
            return row["key"], str(row["value"])
    return None


def _settings_reasons(ctx: Context, timeouts: pl.DataFrame) -> list[str]:
    out = []
    for keys, (bad, text) in _ENV_REASONS.items():
        found = _env_value(ctx, keys)
        if found and found[1].strip() in bad:
            out.append(text.format(k=found[0], v=found[1]))
    colls = ctx.table("collectives")
    if timeouts.is_empty() and not colls.is_empty() and "timeout_ms" in colls.columns:
        ms = colls["timeout_ms"].drop_nulls()
        if len(ms) and int(ms.max()) > _RAISED_TIMEOUT_MS:
            out.append(f"the collective timeout was raised to Timeout(ms)={int(ms.max())} "
                       f"({int(ms.max()) / 3_600_000:.1f} h; the default is 10 min)")
    return out


# Frames of blocking calls no ProcessGroupNCCL watchdog covers.
_OUTSIDE = [
    (r"deep_ep|nvshmem", "DeepEP/NVSHMEM", "a DeepEP/NVSHMEM kernel or barrier, which runs outside ProcessGroupNCCL: "
                                           "no NCCL watchdog times it out"),
    (r"ProcessGroupGloo|gloo", "gloo", "a gloo process group: ProcessGroupNCCL's watchdog does not cover it (gloo's "
                                      "own timeout applies)"),
    (r"^item$|cudaStreamSynchronize|cudaDeviceSynchronize|^synchronize$|_local_scalar_dense",
     "host sync", "a host-side CUDA sync (.item() / torch.cuda.synchronize / cudaStreamSynchronize): the host "
                  "blocks on the GPU stream, and only enqueued NCCL work is watched"),
]


def _outside_pg_nccl(ctx: Context, hang) -> list[str]:
    from postmortem.rules.hang.hang_model import _stacks

    stacks = _stacks(ctx)
    if stacks.is_empty():
        return []
    main = stacks.filter(pl.col("thread_name") == "MainThread")
    text = pl.concat_str([pl.col("function").fill_null(""), pl.lit(" "), pl.col("file").fill_null("")])
    out = []
    events = ctx.table("events")
    if not events.is_empty() and {"kind", "rank"} <= set(events.columns):
        gloo = events.filter(pl.col("kind").fill_null("").str.contains("gloo")
                             | pl.col("message").fill_null("").str.contains("third_party/gloo|ProcessGroupGloo"))
        if not gloo.is_empty():
            ranks = sorted(set(gloo["rank"].drop_nulls().to_list()))
            out.append(f"rank(s) {', '.join(map(str, ranks[:8]))} waited in a gloo process group: ProcessGroupNCCL's "
                       "watchdog does not cover it (gloo's own timeout applies)")
    for pattern, label, why in _OUTSIDE:
        if label == "gloo" and out:
            continue
        hit = main.filter(text.str.contains(pattern) | pl.col("function").fill_null("").str.contains(pattern))
        if hit.is_empty():
            continue
        ranks = sorted(set(hit["stack_rank"].drop_nulls().to_list()))
        if label == "host sync" and not (set(ranks) - set(hang.culprits)):
            continue
        out.append(f"rank(s) {', '.join(map(str, ranks[:8]))}{' ...' if len(ranks) > 8 else ''} block in {why}")
    return out


def hang_span(ctx: Context):
    """(last progress, end of logs) for the attempt, from timestamped rows."""
    last_progress = None
    iterations = ctx.table("iterations")
    if not iterations.is_empty() and "ts" in iterations.columns:
        last_progress = iterations["ts"].max()
    # A checkpoint that finished saving after the last step is progress too (a long final save
    # is not a hang).
    events = ctx.table("events")
    if last_progress is not None and {"kind", "ts"} <= set(events.columns):
        saved = events["ts"].filter(events["kind"].cast(pl.String) == "checkpoint_save_done").max()   # Series work, no query
        if saved is not None and saved > last_progress:
            last_progress = saved
    # The one end of the logs every view gives (postmortem.analyzer.timeline.log_bounds).
    bound = log_end(ctx.run, ctx.attempt)
    if last_progress is None or bound is None:
        return None
    end = bound["ts"]
    return (last_progress, end) if end > last_progress else None


def configured_timeout_s(ctx: Context) -> float | None:
    settings = ctx.table("settings")
    if settings.is_empty():
        return None
    minutes = (settings.filter(pl.col("key") == "distributed_timeout_minutes")["value"]
               .cast(pl.Float64, strict=False).drop_nulls())
    return float(minutes[-1]) * 60 if len(minutes) else None
