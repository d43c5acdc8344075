"""Collectives from profiler timelines (nsys kernels, Kineto kernels) and their timing.

Input: the ``kernels`` table (``postmortem.parsers.nsys``, ``postmortem.parsers.kineto``), one row per GPU kernel
with the NCCL collective decoded from its name or Kineto args and the global rank of the
process that ran it.

Output:

* rows appended to ``collectives`` with ``kind`` = ``nsys_kernel`` / ``kineto_kernel``
  (never a watchdog kind: ``postmortem.rules.hang.hang_model`` reads only watchdog/blocking-wait rows, and a
  completed kernel is not a timeout);
* ``collective_timing``: one row per (collective instance, rank): ``coll_index`` (the k-th
  instance of that collective on its communicator), ``op``, ``rank``, ``start``/``end``,
  ``skew_ns`` (start minus the earliest start of the same instance across ranks),
  ``last_arrival`` (this rank started it last), ``algbw_gbyte_s``/``busbw_gbyte_s``.

Matching across ranks (``docs/formats/nsys-and-traces.md`` 4.5): by ``(pg, seq)`` when Kineto gives
a sequence number; otherwise by order -- the k-th kernel of the same (pg, collective, dtype)
on each rank -- which is exact for one process group and ambiguous when several groups run
the same collective on different streams without a pg name.

**Read the numbers this way.** A collective kernel starts when its rank arrives and ends
when the slowest peer has sent its data, so its *duration includes the time spent waiting
for late peers*: the late rank has the *shortest* kernel, everyone else's runs longer.
Arrival skew (``skew_ns``) is what identifies the straggler -- the rank with the largest skew,
repeatedly. Bandwidth from a waiting rank's duration understates the link; ``busbw`` of the
instance's shortest kernel (``busbw_best_gbyte_s``) is the better link estimate. Clocks of
different hosts differ (NTP, 0.1-10 ms): skews across nodes below that are not evidence.

Bandwidth per ``docs/formats/hardware.md`` (busbw factors from ``analyzer/hardware.toml``, nccl-tests
convention, GB = 1e9 B):
``algbw = S / t``; ``busbw = algbw x factor``; S is the per-rank buffer for all_reduce,
broadcast, reduce and send/recv, the total array (``n x count``) for reduce_scatter,
all_gather, alltoall, gather and scatter; factor ``2(n-1)/n`` for all_reduce, ``(n-1)/n`` for
reduce_scatter/all_gather/alltoall/gather/scatter, 1 for broadcast/reduce/send/recv.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import hardware

KINDS = {"nsys": "nsys_kernel", "kineto": "kineto_kernel", "inspector": "inspector_record"}

TIMING_SCHEMA = {
    "coll_index": pl.Int64, "coll_key": pl.String, "op": pl.String, "pg": pl.String, "seq": pl.Int64,
    "rank": pl.Int64, "source": pl.String, "start": pl.Datetime("ns"), "end": pl.Datetime("ns"),
    "dur_ns": pl.Int64, "skew_ns": pl.Int64, "last_arrival": pl.Boolean, "ranks_seen": pl.UInt32,
    "group_size": pl.Int64, "bytes": pl.Int64, "algbw_gbyte_s": pl.Float64, "busbw_gbyte_s": pl.Float64,
    "busbw_best_gbyte_s": pl.Float64, "rank_confidence": pl.String, "input_id": pl.UInt32,
}


def build(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """``collectives`` (existing rows plus kernel rows) and ``collective_timing``."""
    kernels = tables.get("kernels")
    if kernels is None or kernels.is_empty():
        return {}
    comm = kernels.filter(pl.col("is_nccl") & pl.col("op").is_not_null() & (pl.col("op") != "generic"))
    if comm.is_empty():
        return {"collective_timing": pl.DataFrame(schema=TIMING_SCHEMA)}
    comm = comm.with_columns(pg=pl.col("pg").fill_null("(by kernel order)"))
    by_seq = pl.col("seq").is_not_null()
    key = pl.concat_str([pl.col("pg"), pl.lit("/"), pl.col("op"), pl.lit("/"), pl.col("dtype").fill_null("?")])
    comm = comm.with_columns(coll_key=pl.when(by_seq).then(pl.concat_str([pl.col("pg"), pl.lit("/seq")]))
                             .otherwise(key)).sort("start")
    comm = comm.with_columns(
        coll_index=pl.when(by_seq).then(pl.col("seq"))
        .otherwise(pl.int_range(0, pl.len(), dtype=pl.Int64).over(["coll_key", "rank", "source"])))
    group = ["source", "coll_key", "coll_index"]
    comm = comm.with_columns(
        first_start=pl.col("start").min().over(group),
        last_start=pl.col("start").max().over(group),
        ranks_seen=pl.col("rank").n_unique().over(group).cast(pl.UInt32),
    )
    n = pl.coalesce(pl.col("group_size"), pl.col("ranks_seen").cast(pl.Int64)).cast(pl.Float64)
    factor = hardware.busbw_factor_expr(pl.col("op"), comm["op"].unique().to_list(), n)
    secs = pl.col("dur_ns").cast(pl.Float64) / 1e9
    algbw = pl.when(secs > 0).then(pl.col("bytes").cast(pl.Float64) / secs / 1e9)
    timing = comm.with_columns(
        skew_ns=(pl.col("start") - pl.col("first_start")).dt.total_nanoseconds(),
        last_arrival=(pl.col("start") == pl.col("last_start")) & (pl.col("ranks_seen") > 1),
        algbw_gbyte_s=algbw, busbw_gbyte_s=algbw * factor, group_size=n.cast(pl.Int64),
    ).with_columns(busbw_best_gbyte_s=pl.col("busbw_gbyte_s").max().over(group))
    timing = timing.select([pl.col(c).cast(t) if c in timing.columns else pl.lit(None, dtype=t).alias(c)
                            for c, t in TIMING_SCHEMA.items()]).sort("source", "coll_key", "coll_index", "rank")
    # The columns of parsers.c10d's collectives rows (null where a kernel cannot say), so the
    # table has one shape whichever inputs a run has.
    rows = comm.select(
        # ``ts`` stays null: log-derived times (glog's local time without zone) and the profile's
        # UTC must not be mixed by rules that take max(ts) as "end of logs"; start/end carry the time.
        "input_id", line_no=pl.lit(None, dtype=pl.UInt32), ts=pl.lit(None, dtype=pl.Datetime("us")),
        level=pl.lit(None, dtype=pl.String), src_file=pl.lit(None, dtype=pl.String),
        pg_id=pl.lit(None, dtype=pl.Int64), pg_guid=pl.lit(None, dtype=pl.String),
        pg_desc=pl.col("pg_desc") if "pg_desc" in comm.columns else pl.lit(None, dtype=pl.String),
        pg_rank=pl.lit(None, dtype=pl.Int64),
        kind=pl.col("source").replace_strict(KINDS, default="profile_kernel", return_dtype=pl.String),
        seq="seq", op="op", numel_in="numel_in", numel_out="numel_out",
        timeout_ms=pl.lit(None, dtype=pl.Int64), ran_for_ms=pl.lit(None, dtype=pl.Int64),
        rank="rank", rank_source="rank_source", rank_confidence="rank_confidence",
        comm=pl.col("pg"), coll_index="coll_index", dtype="dtype", bytes="bytes", start="start", end="end",
        dur_ns="dur_ns", state=pl.lit("completed"),
        # attribution columns every annotated table has (postmortem.analyzer.pipeline._annotate)
        node=pl.col("host"), node_source=pl.when(pl.col("host").is_not_null()).then(pl.lit("profile host name")),
        pid=pl.col("pid"), attempt=pl.lit(None, dtype=pl.Int64), attempt_source=pl.lit(None, dtype=pl.String),
    )
    existing = tables.get("collectives")
    collectives = rows if existing is None or existing.is_empty() else pl.concat([existing, rows],
                                                                                 how="diagonal_relaxed")
    return {"collectives": collectives, "collective_timing": timing}


def extend_ranks(ranks: pl.DataFrame, tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Ranks only a profile names (no log line did) join the ``ranks`` table with the
    profile's mapping source and confidence."""
    procs = tables.get("profile_processes")
    if procs is None or procs.is_empty():
        return ranks
    known = set(ranks["rank"].drop_nulls().to_list()) if "rank" in ranks.columns else set()
    order = {"certain": 0, "derived": 1, "guessed": 2}
    new = (procs.filter(pl.col("rank").is_not_null() & ~pl.col("rank").is_in(list(known)))
           # best confidence first; among equals a row that knows the pid/device (nsys) over one that does not
           .sort(pl.col("rank_confidence").replace_strict(order, default=9, return_dtype=pl.Int64),
                 pl.col("pid").is_null())
           .unique("rank", keep="first", maintain_order=True)
           .select("rank", node=pl.col("host"), pid="pid", local_rank="local_rank", cuda_dev="device",
                   bus_id=pl.col("bus_id") if "bus_id" in procs.columns else pl.lit(None, dtype=pl.String),
                   source=pl.concat_str([pl.col("source"), pl.lit(": "), pl.col("rank_source")]),
                   confidence="rank_confidence", inputs=pl.lit(1, dtype=pl.UInt32)))
    if new.is_empty():
        return ranks
    if ranks.is_empty():
        return new.sort("rank")
    return pl.concat([ranks, new], how="diagonal_relaxed").sort("rank")


# Tables a profiler input produces without any log line (postmortem.analyzer.pipeline accepts a run of
# only such inputs).
PROFILE_TABLES = ("kernels", "nvtx", "profile_processes", "profile_info")


def empty_lines() -> pl.DataFrame:
    """An empty per-line frame with the envelope's columns, for runs with no log input."""
    from postmortem.parsers.lines import ENVELOPE_SCHEMA

    return pl.DataFrame(schema=dict(ENVELOPE_SCHEMA) | {"kind": pl.String, "input_id": pl.UInt32})
