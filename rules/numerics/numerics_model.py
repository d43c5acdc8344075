"""Shared reading of the training numerics for P020-P029: NaN/inf values, omitted losses, the
rerun state machine's reports and the GPU faults that can explain them. Not a rule."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import polars as pl

from postmortem.parsers.base import groups_of
from postmortem.rules.base import Context, memoised, with_columns
from postmortem.rules.hardware.hw_model import offsets

# Xids that corrupt results or stop a GPU (rules/hardware/g001_gpu_fault.py FATAL, without the app ones)
GPU_FAULTS = {48, 62, 64, 74, 79, 94, 95, 119, 120, 121, 140, 144, 145, 146, 147, 148, 149, 150, 154}
NAN_EVENT_KINDS = ("nan_detected", "inf_detected")
TOLERANCE_S = {"high": 2.0, "medium": 5.0, "low": 30.0}


@dataclass
class Bad:
    """One bad value: a NaN/inf loss or grad norm, an omitted loss, a NaN-iteration count, a rerun report."""
    what: str
    iteration: int | None
    ts: datetime | None             # as printed (the printing node's clock)
    rank: int | None
    node: str | None
    input_id: int | None
    line_no: int | None
    named_by: str                   # "rerun" (the rerun machine names the rank) or "log" (who printed it)
    value: float | None = None


@dataclass
class Numerics:
    bad: list[Bad] = field(default_factory=list)
    rows: int = 0                   # training iteration rows
    finite_after: int = 0           # rows with a finite loss after the first bad row
    bad_rows: int = 0               # iteration rows with a bad value
    last_bad: bool = False          # the last iteration row printed is bad
    last_iteration: int | None = None

    @property
    def first(self) -> Bad | None:
        return self.bad[0] if self.bad else None


def _nan(v) -> bool:
    return isinstance(v, float) and (math.isnan(v) or math.isinf(v))


def training_rows(ctx: Context) -> pl.DataFrame:
    it = ctx.table("iterations")
    if it.is_empty() or "lm_loss" not in it.columns:
        return pl.DataFrame()
    it = with_columns(it, validation=pl.Boolean)  # only frameworks that print validation lines have the column
    return it.lazy().filter(~pl.col("validation").fill_null(False)).sort("input_id", "line_no").collect(engine="in-memory")


@memoised
def read_numerics(ctx: Context) -> Numerics:
    out = Numerics()
    rows = training_rows(ctx)
    bad_lines: set[tuple] = set()
    if not rows.is_empty():
        out.rows = rows.height
        for _, stream in groups_of(rows, "input_id", maintain_order=True):
            had_loss = False
            for r in stream.iter_rows(named=True):
                loss, gn = r.get("lm_loss"), r.get("grad_norm")
                skipped = r.get("skipped_iterations")
                what = None
                if _nan(loss):
                    what = f"loss {loss}"
                elif _nan(gn):
                    what = f"grad norm {gn}"
                elif loss is None and had_loss and r.get("framework") == "megatron" and not skipped:
                    # Megatron prints a loss only when its average is > 0: a NaN loss is left out
                    what = "loss left out (Megatron omits a NaN loss)"
                elif (r.get("nan_iterations") or 0) > 0:
                    what = f"{r['nan_iterations']} NaN iteration(s) counted"
                if loss is not None and not _nan(loss):
                    had_loss = True
                if what is None:
                    continue
                key = (r["input_id"], r["line_no"])
                bad_lines.add(key)
                out.bad.append(Bad(what, r.get("iteration"), r.get("ts"), r.get("rank"), r.get("node"),
                                   r["input_id"], r["line_no"], "log", loss if _nan(loss) else gn))
        bad_seen = False
        for r in rows.sort("iteration", "input_id", "line_no", nulls_last=True).iter_rows(named=True):
            is_bad = (r["input_id"], r["line_no"]) in bad_lines
            bad_seen = bad_seen or is_bad
            if bad_seen and not is_bad and r.get("lm_loss") is not None and not _nan(r.get("lm_loss")) \
                    and r.get("lm_loss") != 0.0:
                out.finite_after += 1
            out.last_bad = is_bad
        out.bad_rows = len(bad_lines)
        out.last_iteration = rows["iteration"].max()
    times = {}
    if not rows.is_empty() and "ts" in rows.columns:
        times = {i: t for i, t in rows.select("iteration", "ts").drop_nulls().iter_rows()}
    ev = ctx.table("events")
    if not ev.is_empty() and "kind" in ev.columns:
        rerun = ev.filter(pl.col("kind").is_in(list(NAN_EVENT_KINDS)))
        for r in rerun.iter_rows(named=True):
            rank = r.get("reported_rank")
            try:
                rank = int(rank) if rank is not None else r.get("rank")
            except ValueError:
                rank = r.get("rank")
            named = re.search(r"\bnode (\S+?),", r.get("message") or "")
            node = (named.group(1) if named else None) or (ctx.gpu_of(rank).get("node") if rank is not None
                                                           else None) or r.get("node")
            ts = r.get("ts") or times.get(r.get("iteration"))   # the rerun line has no time: its iteration's
            out.bad.append(Bad(f"rerun state machine: {r.get('detail') or r['kind']}", r.get("iteration"),
                               ts, rank, node, r["input_id"], r["line_no"], "rerun", r.get("value")))
    # earliest iteration first; at one iteration the rerun machine's report (it names the rank) first
    out.bad.sort(key=lambda b: (b.iteration if b.iteration is not None else 1 << 62, b.named_by != "rerun",
                                b.ts or datetime.max, b.input_id or 0, b.line_no or 0))
    return out


def gpu_faults(ctx: Context) -> pl.DataFrame:
    """Xid rows that mean a GPU fault, with their code as ``xid``."""
    ev = ctx.table("node_events")
    if ev.is_empty() or "kind" not in ev.columns:
        return pl.DataFrame()
    rows = ev.filter(pl.col("kind").is_in(["xid", "gpu_off_bus"]) & pl.col("node").is_not_null())
    if rows.is_empty():
        return rows
    code = (pl.when(pl.col("kind") == "gpu_off_bus").then(pl.lit(79))
            .otherwise(pl.col("code").cast(pl.Int64, strict=False)))
    rows = rows.with_columns(xid=code).filter(pl.col("xid").is_in(list(GPU_FAULTS)))
    for c, t in (("ts_utc", pl.Datetime("us")), ("order_confidence", pl.String), ("global_rank", pl.Int64)):
        if c not in rows.columns:
            rows = rows.with_columns(pl.lit(None, dtype=t).alias(c))
    return rows


def on_reference(ctx: Context, ts: datetime | None, node: str | None) -> datetime | None:
    """A printed time on the reference clock (the node's measured offset removed)."""
    if ts is None:
        return None
    off = offsets(ctx).get(node or "", None) or 0.0
    return ts - timedelta(seconds=off)


def fault_before(ctx: Context, bad: Bad, faults: pl.DataFrame, nodes: set[str]) -> tuple[dict | None, str]:
    """The GPU fault on ``nodes`` at or before ``bad`` (dict of the row) and how it was ordered:
    ``before`` (times compared), ``unordered`` (a fault there, but no time to compare) or ``none``."""
    if faults.is_empty():
        return None, "none"
    here = faults.filter(pl.col("node").is_in(sorted(nodes))) if nodes else faults.clear()
    if here.is_empty():
        return None, "none"
    t = on_reference(ctx, bad.ts, bad.node)
    if t is None:
        return here.sort("ts_utc", nulls_last=True).row(0, named=True), "unordered"
    best = None
    for r in here.sort("ts_utc", nulls_last=True).iter_rows(named=True):
        if r["ts_utc"] is None:
            continue
        tol = TOLERANCE_S.get(r.get("order_confidence") or "low", 30.0)
        if r["ts_utc"] <= t + timedelta(seconds=tol):
            best = r
            break
    if best is not None:
        return best, "before"
    if here["ts_utc"].drop_nulls().len() == 0:
        return here.row(0, named=True), "unordered"
    return None, "after"
