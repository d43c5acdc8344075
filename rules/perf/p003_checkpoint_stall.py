"""P003 checkpoint-stall: a checkpoint save far slower than its size and the storage tier explain, or one that never finished.

What it detects
    Each checkpoint save (``checkpoint_save_start`` with its ``duration_s``) is priced: the
    checkpoint's size is 14 bytes per parameter for mixed-precision Adam (bf16 weights, fp32
    master weights, two fp32 moments) from the parameter count the framework printed; the
    write rate is that of the slowest shared storage tier (NFS, ~1 GB/s for the whole job)
    unless the logs show which tier it is. A save taking more than twice that (and a minute
    more) is a warning, with the kernel's ``nfs: server ... not responding`` lines of the save's
    window when there are any. A save that started and never printed its completion line is a
    warning that says what the job lost: the iterations since the last complete checkpoint.

Why it matters
    A synchronous save stops every GPU of the job: a save of ten minutes every thousand steps
    can cost more than a slow link. A save cut off by a crash, a time limit or a hang leaves a
    partial checkpoint that a restart must not load, and all the work since the previous one
    is lost.

What to do
    Save asynchronously (Megatron ``--async-save`` with ``--ckpt-format torch_dist``; PyTorch DCP
    ``async_save``), to a faster tier (a parallel file system, node-local NVMe staged to shared
    storage), less often, or shard it over all data-parallel ranks (Megatron
    ``--ckpt-fully-parallel-save``). For an unfinished save, restart from the last complete
    checkpoint (``latest_checkpointed_iteration.txt`` names it) and delete the partial folder.

Known false positives
    The size estimate assumes an Adam checkpoint of the whole model; a weights-only save is
    7 x smaller and takes less, which only makes a slow save look less slow. The first save of
    a run may include one-time metadata exchange (torch_dist) and the save's duration is
    timed on rank 0 only.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.perf.perf_model import (CKPT_BYTES_PER_PARAM, STORAGE_TIERS, checkpoint_bytes, fmt_params, median, model,
                              train_steps)

RULE = Rule(code="P003", name="checkpoint-stall", severity=Severity.WARNING, category=Category.PERF, since="0.1.0")

SLOW_RATIO = 2.0
SLACK_S = 60.0


def check(ctx: Context) -> list[Finding]:
    events = ctx.table("events")
    if events.is_empty() or "kind" not in events.columns:
        return []
    # Columns only some event kinds fill are absent when no event filled them (no line with a time).
    events = with_columns(events, ts=pl.Datetime("us"), duration_s=pl.Float64, finished=pl.Boolean,
                          iteration=pl.Int64, path=pl.String, node=pl.String)
    saves = events.filter(pl.col("kind") == "checkpoint_save_start").sort("ts", nulls_last=True)
    if saves.is_empty():
        return []
    m = model(ctx)
    size = checkpoint_bytes(m)
    nfs = _nfs_events(ctx)
    tier = "NFS" if nfs is not None and not nfs.is_empty() else None
    rate = STORAGE_TIERS["NFS"]
    findings: list[Finding] = []
    durations = [d for d in saves["duration_s"].to_list() if d is not None]
    typical = median(durations)
    slow_rows = []
    for row in saves.iter_rows(named=True):
        d = row.get("duration_s")
        if not row.get("finished") or d is None:
            continue
        if size:
            expected = size / 1e9 / rate
            if d > SLOW_RATIO * expected + SLACK_S:
                slow_rows.append((row, expected))
        elif typical and len(durations) >= 3 and d > 3 * typical + SLACK_S:
            slow_rows.append((row, None))
    if slow_rows:
        findings.append(_slow(ctx, slow_rows, m, size, rate, tier, nfs))
    unfinished = saves.filter(~pl.col("finished").fill_null(False))
    if not unfinished.is_empty():
        findings.append(_unfinished(ctx, unfinished.row(-1, named=True), saves, m, size, rate, nfs))
    return findings


def _nfs_events(ctx: Context) -> pl.DataFrame | None:
    ne = ctx.table("node_events")
    if ne.is_empty() or "kind" not in ne.columns:
        return None
    return ne.filter(pl.col("kind").is_in(["nfs_not_responding", "nfs_ok"]))


def _size_text(m, size) -> str:
    return (f"{size / 1e9:,.0f} GB ({CKPT_BYTES_PER_PARAM} bytes per parameter for mixed-precision Adam x "
            f"{fmt_params(m.total_params)} parameters)")


def _nfs_in(nfs, start, end) -> pl.DataFrame:
    if nfs is None or nfs.is_empty() or start is None or "ts_utc" not in nfs.columns:
        return pl.DataFrame()
    lo = start - _td(120)
    return nfs.filter(pl.col("ts_utc").is_not_null() & (pl.col("ts_utc") >= lo) & (pl.col("ts_utc") <= end + _td(120)))


def _td(seconds: float):
    from datetime import timedelta
    return timedelta(seconds=seconds)


def _slow(ctx, rows, m, size, rate, tier, nfs) -> Finding:
    items, evidence, nodes = [], [], set()
    confidence = 0.6
    for row, expected in rows:
        d = row["duration_s"]
        which = f"iteration {row['iteration']}" if row["iteration"] is not None else "a save"
        items.append(f"{which}: {d:,.0f} s" + (f" ({d / expected:.1f}x)" if expected else ""))
        if len(evidence) < 3 and row.get("input_id") is not None:
            evidence.append(ctx.evidence(row["input_id"], row["line_no"], f"save took {d:,.0f} s"))
        # A save line without a time cannot be matched to NFS stalls.
        hits = _nfs_in(nfs, row["ts"], row["ts"] + _td(d)) if row["ts"] is not None else pl.DataFrame()
        if not hits.is_empty():
            confidence = 0.8
            nodes |= set(hits["node"].drop_nulls().to_list())
            for h in hits.head(2).iter_rows(named=True):
                if h.get("input_id") is not None and len(evidence) < 6:
                    evidence.append(ctx.evidence(h["input_id"], h["line_no"], "NFS server stall during the save"))
    if size:
        basis = (f"a checkpoint of {_size_text(m, size)} needs about {size / 1e9 / rate:,.0f} s at {rate:g} GB/s "
                 f"({'NFS, the tier the kernel logs show' if tier else 'NFS, the slowest shared storage tier'})")
    else:
        basis = "far longer than the run's other saves (the parameter count is unknown, so the size is too)"
    cause = (f"; the NFS server stopped responding on {', '.join(sorted(nodes))} during the save" if nodes else "")
    total = sum(r["duration_s"] for r, _ in rows)
    message = (f"{len(rows)} checkpoint save{'s' if len(rows) > 1 else ''} took far longer than the storage "
               f"explains: {', '.join(items)}; {basis}{cause}. Every GPU of the job waited "
               f"{total:,.0f} s ({total * (ctx.world_size or 1) / 3600:,.1f} GPU-hours)")
    return RULE.finding(confidence=confidence, title="Checkpoint save stalled the job", message=message + ".",
                   nodes=sorted(nodes), evidence=evidence, details={"saves": [{"iteration": r["iteration"], "duration_s": r["duration_s"],
                                       "expected_s": e} for r, e in rows], "size_bytes": size,
                            "tier": tier or "NFS (assumed)"},
                   suggestion="Save asynchronously (Megatron --async-save with --ckpt-format torch_dist) or to a "
                              "faster tier; check the NFS server (nfsstat -s, its network) at the times listed.")


def _unfinished(ctx, row, saves, m, size, rate, nfs) -> Finding:
    done = saves.filter(pl.col("finished").fill_null(False) & pl.col("iteration").is_not_null())
    last_ok = done["iteration"].max() if not done.is_empty() else None
    steps = train_steps(ctx)
    step_s = (median(steps["elapsed_ms"].to_list()) or 0) / 1000 if not steps.is_empty() else 0
    it = row.get("iteration")
    end = _job_end(ctx)
    waited = (end - row["ts"]).total_seconds() if end is not None and row.get("ts") is not None else None
    # A save line that names no iteration (some frameworks print only the path) is "a checkpoint".
    what = f"iteration {it}" if it is not None else "a checkpoint"
    parts = [f"the save of {what} to {row.get('path') or '?'} started and never printed its completion"]
    if waited is not None and waited >= 0:
        parts.append(f"the job's last line came {waited:,.0f} s later")
    if size:
        parts.append(f"a checkpoint of {_size_text(m, size)} needs about {size / 1e9 / rate:,.0f} s at "
                     f"{rate:g} GB/s (NFS)")
    if it is not None:
        base = last_ok if last_ok is not None else 0
        lost_it = it - base
        cost = f"the last complete checkpoint is {'iteration ' + str(last_ok) if last_ok is not None else 'none'}"
        if step_s and lost_it > 0:
            hours = lost_it * step_s / 3600
            cost += (f": {lost_it} iterations x {step_s:.1f} s = {hours:,.1f} h of training"
                     f"{' on ' + str(ctx.world_size) + ' GPUs (' + format(hours * ctx.world_size, ',.0f') + ' GPU-hours)' if ctx.world_size else ''}"
                     " are lost")
        parts.append(cost)
    hits = _nfs_in(nfs, row.get("ts"), end) if end is not None else pl.DataFrame()
    nodes = sorted(set(hits["node"].drop_nulls().to_list())) if not hits.is_empty() else []
    if nodes:
        parts.append(f"the NFS server stopped responding on {', '.join(nodes)} during it")
    evidence = [ctx.evidence(row["input_id"], row["line_no"], "save started, no completion line")] \
        if row.get("input_id") is not None else []
    return RULE.finding(confidence=0.7 if nodes else 0.6, title=f"Checkpoint save of {what} never finished",
                   message="; ".join(parts) + ".", nodes=nodes, evidence=evidence, details={"iteration": it, "last_complete": last_ok, "waited_s": waited, "size_bytes": size},
                   suggestion="Restart from the last complete checkpoint (latest_checkpointed_iteration.txt) and "
                              "delete the partial folder; save asynchronously or to faster storage.")


def _job_end(ctx):
    if "ts" not in ctx.run.columns("events"):  # no event carried a time
        return None
    lines = ctx.frame("SELECT max(ts) AS t FROM events WHERE ts IS NOT NULL" +
                      (" AND (attempt = ? OR attempt IS NULL)" if ctx.attempt is not None else ""),
                      [ctx.attempt] if ctx.attempt is not None else [])
    return lines["t"][0] if not lines.is_empty() else None
