"""Shared helpers of the hardware rules (G001-G009): the first error of an attempt on a
cross-node clock, the physical GPU an event names, and the order of a node event against
that first error.

Times: application lines (c10d glog, tracebacks, torchrun) are on their node's clock; the
node's ``offset_s`` in ``node_clocks`` (node clock minus the reference) is subtracted, the
same correction ``postmortem.analyzer.clocks`` applies to ``node_events.ts_utc``. Nothing here compares
two clocks without that correction, and every comparison says how sure it is.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

import polars as pl

from postmortem.analyzer import topology
from postmortem.rules.base import Context, memoised

# Events that mark a failure of the job (the first of them is "the first error").
ERROR_EVENT_KINDS = ["watchdog_timeout", "blocking_wait_timeout", "heartbeat_timeout", "watchdog_exception",
                     "exception", "python_traceback", "cuda_error", "cuda_fault", "cuda_oom", "nccl_error", "ecc",
                     "illegal_memory_access", "illegal_instruction", "misaligned_address", "launch_failure",
                     "device_side_assert", "out_of_memory", "signal", "faulthandler", "store_error", "gloo_error"]

# Tolerance (s) when comparing an event with the first error, by the event's order_confidence.
TOLERANCE_S = {"high": 2.0, "medium": 5.0, "low": 30.0}


@dataclass
class FirstError:
    ts: datetime            # on the reference clock (node offset removed)
    kind: str
    rank: int | None
    node: str | None
    input_id: int | None
    line_no: int | None
    offset_known: bool      # the node's clock offset was measured (or there is one node)


@memoised
def node_topology(ctx: Context) -> topology.Topology:
    """What ``nvidia-smi topo -m`` says of each node, read once per report (G007 and the
    transport rules' ``fabric``); read only."""
    return topology.load(ctx.table("topology"), ctx.table("topo_nics"))


def offsets(ctx: Context) -> dict[str, float | None]:
    clocks = ctx.table("node_clocks")
    if clocks.is_empty():
        return {}
    return {n: o for n, o in clocks.select("node", "offset_s").iter_rows()}


def _timed(frame: pl.DataFrame, ts: str, kind: pl.Expr) -> pl.DataFrame:
    cols = set(frame.columns)
    if frame.is_empty() or ts not in cols or "node" not in cols:
        return pl.DataFrame()
    rank = pl.col("rank") if "rank" in cols else pl.lit(None, dtype=pl.Int64)
    return frame.filter(pl.col(ts).is_not_null()).select(
        ts=pl.col(ts).cast(pl.Datetime("us")), kind=kind, rank=rank.cast(pl.Int64), node=pl.col("node").cast(pl.String),
        input_id=pl.col("input_id").cast(pl.Int64), line_no=pl.col("line_no").cast(pl.Int64))


@memoised
def first_error(ctx: Context) -> FirstError | None:
    """The earliest failure of this attempt: a watchdog timeout, an exception or CUDA error,
    or a non-zero exit, with its node's clock offset removed."""
    parts = []
    coll = ctx.table("collectives")
    if not coll.is_empty() and "kind" in coll.columns:
        parts.append(_timed(coll.filter(pl.col("kind") == "watchdog_timeout"), "ts", pl.lit("watchdog timeout")))
    events = ctx.table("events")
    if not events.is_empty() and "kind" in events.columns:
        parts.append(_timed(events.filter(pl.col("kind").is_in(ERROR_EVENT_KINDS)), "ts",
                            pl.col("kind").str.replace_all("_", " ")))
    exits = ctx.table("exits")
    # A failed exit comes after its rank's own timeout or exception, and torchrun's summary is printed
    # by another host than the worker's at times: it counts only when nothing else marks the failure.
    if all(p.is_empty() for p in parts) and not exits.is_empty() and {"exitcode", "time"} <= set(exits.columns):
        failed = exits.filter((pl.col("exitcode").fill_null(0) != 0) & pl.col("rank").is_not_null())
        if not failed.is_empty():
            ranks = ctx.ranks.select("rank", _rn="node") if not ctx.ranks.is_empty() else None
            if ranks is not None:
                failed = failed.join(ranks, on="rank", how="left").with_columns(node=pl.coalesce("_rn", "node"))
            parts.append(_timed(failed, "time", pl.lit("worker exit")))
    parts = [p for p in parts if not p.is_empty()]
    result = None
    if parts:
        rows = pl.concat(parts, how="vertical_relaxed")
        offs = offsets(ctx)
        known = {n for n, o in offs.items() if o is not None}
        single = len({n for n in rows["node"].drop_nulls().to_list()}) <= 1
        rows = rows.with_columns(
            off=pl.col("node").replace_strict({n: o or 0.0 for n, o in offs.items()}, default=0.0,
                                              return_dtype=pl.Float64).fill_null(0.0))
        rows = rows.with_columns(ts=pl.col("ts") - pl.duration(microseconds=(pl.col("off") * 1e6).cast(pl.Int64)))
        row = rows.sort("ts", "input_id", "line_no").row(0, named=True)
        result = FirstError(row["ts"], row["kind"], row["rank"], row["node"], row["input_id"], row["line_no"],
                            single or row["node"] in known)
    return result


def attempt_start(ctx: Context) -> datetime | None:
    """The earliest time this attempt is known to have been running (on its nodes' clocks): the first
    line any rank logged, the start of a collective that timed out (its time minus ``ran for``), or
    the scheduler's start of the job."""
    times = []
    for name in ("events", "collectives", "iterations"):
        frame = ctx.table(name)
        if not frame.is_empty() and "ts" in frame.columns:
            value = frame["ts"].min()
            if value is not None:
                times.append(value)
    coll = ctx.table("collectives")
    if not coll.is_empty() and {"ts", "ran_for_ms"} <= set(coll.columns):
        value = coll.filter(pl.col("ran_for_ms").is_not_null()).select(
            (pl.col("ts") - pl.duration(milliseconds=pl.col("ran_for_ms").cast(pl.Int64))).min()).item()
        if value is not None:
            times.append(value)
    job = ctx.table("job")
    if not job.is_empty() and "start" in job.columns and job.schema["start"] == pl.Datetime("us"):
        value = job["start"].min()
        if value is not None:
            times.append(value)
    return min(times) if times else None


def gpu_descriptor(ctx: Context, node: str, pci: str | None, rank: int | None) -> dict:
    """What the report's RMA action needs: node, GPU index, bus id, serial, uuid (and the rank)."""
    gpu = ctx.gpu_of(rank) if rank is not None else {"node": node}
    gpu["node"] = gpu.get("node") or node
    if pci:
        gpu["bus_id"] = pci
    ident = ctx.table("gpu_identity")
    if not ident.is_empty() and pci:
        row = ident.filter((pl.col("node") == node) & (pl.col("pci") == pci))
        if not row.is_empty():
            r = row.row(0, named=True)
            for key in ("gpu_index", "serial", "uuid", "product"):
                if r.get(key) is not None:
                    gpu[key] = r[key]
            if gpu.get("cuda_dev") is None and r.get("cuda_dev") is not None:
                gpu["cuda_dev"] = r["cuda_dev"]
    return gpu


def gpu_label(gpu: dict) -> str:
    index = gpu.get("gpu_index", gpu.get("cuda_dev"))
    parts = [gpu.get("node") or "?", f"GPU {index}" if index is not None else "GPU ?"]
    if gpu.get("bus_id"):
        parts.append(f"({gpu['bus_id']})")
    return " ".join(parts)


def job_nodes(ctx: Context) -> set[str]:
    """Nodes that ran a rank of this job (rank map), or that the scheduler gave the job."""
    nodes = set(ctx.ranks["node"].drop_nulls().to_list()) if not ctx.ranks.is_empty() else set()
    jn = ctx.table("job_nodes")
    if not jn.is_empty() and "node" in jn.columns:
        nodes |= {n.split(".")[0] for n in jn["node"].drop_nulls().to_list()}
    return nodes


def occurrences(rows: pl.DataFrame, gap_s: float = 2.0) -> list[dict]:
    """Distinct occurrences of one event among its copies (dmesg and the journal print the same
    message; both are rows): rows within ``gap_s`` of the previous one are the same occurrence.
    Rows without a time count per input (the input with the most copies wins)."""
    timed = rows.filter(pl.col("ts_utc").is_not_null()).sort("ts_utc")
    groups: list[list[dict]] = []
    for row in timed.iter_rows(named=True):
        if groups and (row["ts_utc"] - groups[-1][-1]["ts_utc"]) <= timedelta(seconds=gap_s):
            groups[-1].append(row)
        else:
            groups.append([row])
    untimed = rows.filter(pl.col("ts_utc").is_null())
    if not groups and not untimed.is_empty():
        per_input = untimed.sort("input_id", "line_no").partition_by("input_id")
        best = max(per_input, key=len)
        groups = [[r] for r in best.iter_rows(named=True)]
    out = []
    for group in groups:
        first = group[0]
        out.append({"ts_utc": first["ts_utc"], "rows": group, "order_confidence": _best_confidence(group)})
    return out


def _best_confidence(rows: list[dict]) -> str | None:
    rank = {"high": 3, "medium": 2, "low": 1}
    best = max((r.get("order_confidence") for r in rows), key=lambda c: rank.get(c or "", 0), default=None)
    return best


def order_against(ts_utc: datetime | None, order_confidence: str | None, first: FirstError | None,
                  same_node: bool = False) -> tuple[str, float | None]:
    """Where a node event stands against the first error: ``before``, ``after``, ``uncertain``
    (within the clocks' tolerance, or the event's time basis is weak), ``unknown`` (no time) or
    ``no-error``; and the seconds from the event to the first error (positive: the event came first).

    On the first error's own node one clock prints both, so only the printed resolution counts,
    and a fault logged within it of an error on that node explains the error."""
    if first is None:
        return "no-error", None
    if ts_utc is None:
        return "unknown", None
    lead = (first.ts - ts_utc).total_seconds()
    conf = order_confidence or "low"
    if same_node:
        tol = TOLERANCE_S["high"]
    else:
        if conf == "high" and not first.offset_known:
            conf = "medium"   # the first error's node clock was never checked against the event's
        if conf == "low":
            return "uncertain", lead
        tol = TOLERANCE_S[conf]
    if lead >= tol or (same_node and lead > -tol):
        return "before", lead
    if lead > -tol:
        return "uncertain", lead
    return "after", lead


def fmt_s(seconds: float) -> str:
    seconds = abs(seconds)
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 120:
        return f"{seconds / 60:.0f} min"
    return f"{seconds:.1f} s"
