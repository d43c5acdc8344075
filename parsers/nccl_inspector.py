"""NCCL Inspector profiler plugin output: one JSON record per collective per communicator.

The Inspector (``ext-profiler/inspector`` in NCCL, ``NCCL_PROFILER_PLUGIN=...inspector.so``,
``NCCL_INSPECTOR_ENABLE=1``) appends to a file per process, for every collective of every
communicator, a JSON object (pretty-printed over many lines, or one per line)::

    {"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1},
     "metadata": {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism":
                  "profiler_plugin", "dump_timestamp_us": 1748030377748202, "hostname": "h",
                  "pid": 1639453},
     "coll_perf": {"coll": "AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184,
                   "coll_exec_time_us": 61974, "coll_timing_source": "kernel_gpu",
                   "coll_algobw_gbs": 277.21, "coll_busbw_gbs": 485.12,
                   "event_trace_sn": {...}, "event_trace_ts": {"coll_start_ts": ..,
                   "coll_stop_ts": .., "kernel_events": [{"channel_id": 0, "kernel_start_ts": ..,
                   "kernel_stop_ts": .., "kernel_record_ts": ..}]}}}

``event_trace_*`` appear with ``NCCL_INSPECTOR_DUMP_VERBOSE=1``; times are microseconds since
the epoch. ``header.id`` is the communicator's id, ``header.rank`` the rank in it.

Tables:

``inspector_records`` -- one row per record: ``comm_id``, ``rank``, ``n_ranks``, ``nnodes``,
  ``hostname``, ``pid``, ``coll``, ``coll_sn``, ``msg_size_bytes``, ``exec_time_us``,
  ``timing_source``, ``algbw_gbs``, ``busbw_gbs``, ``dump_ts`` and, verbose only, ``start`` /
  ``end`` (the first kernel start and the last kernel stop across channels, else the
  collective's own start/stop), ``channels``; ``format_version``.
``kernels`` -- the same records in the profile timeline's shape (``source`` ``inspector``,
  ``op`` from ``coll``, ``seq`` = ``coll_sn``, ``pg`` = the communicator id, ``group_size`` =
  ``n_ranks``, ``bytes`` = the bytes the Inspector's own algbw stands for), so
  ``postmortem.analyzer.collective_timing`` prices them like nsys and Kineto kernels and the busbw and
  straggler rules read them; ``rank`` is the communicator rank (global only for the job-wide
  communicator, whose ``profile_processes`` row maps it: ``derived``).

Objects are found in the lines by position (a line ``{`` or ``{"header"`` at column 0 starts
one) and decoded by Polars' JSON reader, all of a file's objects at once; an object cut off
(a dump interrupted by the job's end) is counted and skipped, never raised.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.base import ParseResult, conform, consumed_of
from postmortem.parsers.tables import SHARED

NAME = "nccl_inspector"

SAMPLE_LINES = [
    '{"header": {"id": "0x7f8c496ae9f661", "rank": 2, "n_ranks": 8, "nnodes": 1}, "metadata": '
    '{"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "profiler_plugin", '
    '"dump_timestamp_us": 1748030377748202, "hostname": "node-a", "pid": 1639453}, "coll_perf": {"coll": '
    '"AllReduce", "coll_sn": 1407, "coll_msg_size_bytes": 17179869184, "coll_exec_time_us": 61974, '
    '"coll_algobw_gbs": 277.210914, "coll_busbw_gbs": 485.119099}}',
    "{",
    '  "header": {',
    '    "id": "0xe62dedaa97644a",',
    '    "rank": 4,',
    '    "n_ranks": 8,',
    '    "nnodes": 1',
    "  },",
    '  "metadata": {',
    '    "inspector_output_format_version": "v4.0",',
    '    "hostname": "node-a",',
    '    "pid": 438776',
    "  },",
    '  "coll_perf": {',
    '    "coll": "ReduceScatter",',
    '    "coll_sn": 1231,',
    '    "coll_msg_size_bytes": 2147483648,',
    '    "coll_exec_time_us": 41057,',
    '    "coll_timing_source": "kernel_gpu",',
    '    "coll_algobw_gbs": 418.439467,',
    '    "coll_busbw_gbs": 366.134533,',
    '    "event_trace_ts": {',
    '      "coll_start_ts": 1752867229235059,',
    '      "coll_stop_ts": 1752867229235064,',
    '      "kernel_events": [',
    '        {"channel_id": 0, "kernel_start_ts": 1752867229235181, "kernel_stop_ts": 1752867229275811, '
    '"kernel_record_ts": 1752867229275811}',
    "      ]",
    "    }",
    "  }",
    "}",
]

_KERNEL_EVENT = pl.Struct({"channel_id": pl.Int64, "kernel_start_ts": pl.Int64, "kernel_stop_ts": pl.Int64,
                           "kernel_record_ts": pl.Int64})
_RECORD = pl.Struct({
    "header": pl.Struct({"id": pl.String, "rank": pl.Int64, "n_ranks": pl.Int64, "nnodes": pl.Int64}),
    "metadata": pl.Struct({"inspector_output_format_version": pl.String, "rec_mechanism": pl.String,
                           "dump_timestamp_us": pl.Int64, "hostname": pl.String, "pid": pl.Int64}),
    "coll_perf": pl.Struct({"coll": pl.String, "coll_sn": pl.Int64, "coll_msg_size_bytes": pl.Int64,
                            "coll_exec_time_us": pl.Float64, "coll_timing_source": pl.String,
                            "coll_algobw_gbs": pl.Float64, "coll_busbw_gbs": pl.Float64,
                            "event_trace_ts": pl.Struct({"coll_start_ts": pl.Int64, "coll_stop_ts": pl.Int64,
                                                         "kernel_events": pl.List(_KERNEL_EVENT)})}),
})

RECORDS_SCHEMA = {"line_no": pl.UInt32, "end_line": pl.UInt32, "comm_id": pl.String, "rank": pl.Int64,
                  "n_ranks": pl.Int64, "nnodes": pl.Int64, "hostname": pl.String, "pid": pl.Int64,
                  "coll": pl.String, "coll_sn": pl.Int64, "msg_size_bytes": pl.Int64, "exec_time_us": pl.Float64,
                  "timing_source": pl.String, "algbw_gbs": pl.Float64, "busbw_gbs": pl.Float64,
                  "dump_ts": pl.Datetime("us"), "start": pl.Datetime("ns"), "end": pl.Datetime("ns"),
                  "channels": pl.Int64, "format_version": pl.String}
EVENTS_SCHEMA = SHARED["events"].columns_of(NAME)


def file_gate(text: pl.Expr) -> pl.Expr:
    return text.str.contains('"coll_perf"', literal=True) | text.str.contains('"coll_sn"', literal=True)


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult()
    text = pl.col("text")
    if not lines.select((text.str.contains('"coll_perf"', literal=True)
                         | text.str.contains('"coll_sn"', literal=True)).any()).item():
        return ParseResult()
    # An object starts at a line `{` (pretty-printed) or `{"header"` (one per line), at column 0.
    start = (text.str.strip_chars_end() == "{") | text.str.starts_with('{"header"')
    df = lines.select("line_no", "text").sort("line_no").with_columns(_obj=start.cast(pl.UInt32).cum_sum())
    df = df.filter(pl.col("_obj") > 0)
    objs = df.group_by("_obj", maintain_order=True).agg(
        line_no=pl.col("line_no").first(), end_line=pl.col("line_no").last(), body=pl.col("text").str.join(""))
    # Keep whole objects of the Inspector's shape: balanced braces, a coll_perf member.
    whole = (pl.col("body").str.count_matches("{", literal=True) == pl.col("body").str.count_matches("}", literal=True))
    shaped = pl.col("body").str.contains('"coll_perf"', literal=True) & pl.col("body").str.contains('"header"', literal=True)
    good = objs.filter(whole & shaped)
    header = pl.col("body").str.contains('"header"', literal=True) & pl.col("body").str.contains('"n_ranks"', literal=True)
    cut = objs.filter(~whole & header)
    records = _decode(good)
    events = pl.DataFrame(schema=EVENTS_SCHEMA)
    if not cut.is_empty():
        events = cut.select(pl.col("line_no").cast(pl.UInt32), kind=pl.lit("inspector_record_cut"),
                            detail=pl.lit("an Inspector record cut off (the dump was interrupted)"),
                            message=pl.col("body").str.slice(0, 200), level=pl.lit("WARN"))
    if records.is_empty():
        return ParseResult(tables={"events": events}, consumed=_consumed(df, cut))
    tables = {"inspector_records": conform(records, RECORDS_SCHEMA), "kernels": _kernels(records),
              "profile_processes": _processes(records), "events": events}
    return ParseResult(tables=tables, consumed=_consumed(df, good, cut))


def _consumed(df: pl.DataFrame, *objs: pl.DataFrame) -> pl.Series:
    ids = pl.concat([o.select("_obj") for o in objs]) if objs else pl.DataFrame(schema={"_obj": pl.UInt32})
    return consumed_of(df.join(ids, on="_obj", how="semi").select("line_no"))


def _decode(objs: pl.DataFrame) -> pl.DataFrame:
    """The records, decoded all at once (one by one only where the batch does not decode)."""
    if objs.is_empty():
        return pl.DataFrame(schema=RECORDS_SCHEMA)
    try:
        decoded = objs.with_columns(_r=pl.col("body").str.json_decode(_RECORD))
    except Exception:  # noqa: BLE001 -- one malformed object: decode each, drop the bad ones
        parts = []
        for row in objs.iter_rows(named=True):
            try:
                parts.append(pl.DataFrame([row]).with_columns(_r=pl.col("body").str.json_decode(_RECORD)))
            except Exception:  # noqa: BLE001
                continue
        if not parts:
            return pl.DataFrame(schema=RECORDS_SCHEMA)
        decoded = pl.concat(parts, how="diagonal_relaxed")
    h, m, c = (pl.col("_r").struct.field(k) for k in ("header", "metadata", "coll_perf"))
    trace = c.struct.field("event_trace_ts")
    kernels = trace.struct.field("kernel_events")
    k_start = kernels.list.eval(pl.element().struct.field("kernel_start_ts")).list.min()
    k_stop = kernels.list.eval(pl.element().struct.field("kernel_stop_ts")).list.max()
    us = lambda e: (e.cast(pl.Int64) * 1000).cast(pl.Datetime("ns"))  # noqa: E731
    return decoded.select(
        pl.col("line_no").cast(pl.UInt32), pl.col("end_line").cast(pl.UInt32),
        comm_id=h.struct.field("id"), rank=h.struct.field("rank"), n_ranks=h.struct.field("n_ranks"),
        nnodes=h.struct.field("nnodes"), hostname=m.struct.field("hostname"), pid=m.struct.field("pid"),
        coll=c.struct.field("coll"), coll_sn=c.struct.field("coll_sn"),
        msg_size_bytes=c.struct.field("coll_msg_size_bytes"), exec_time_us=c.struct.field("coll_exec_time_us"),
        timing_source=c.struct.field("coll_timing_source"), algbw_gbs=c.struct.field("coll_algobw_gbs"),
        busbw_gbs=c.struct.field("coll_busbw_gbs"),
        dump_ts=m.struct.field("dump_timestamp_us").cast(pl.Datetime("us")),
        start=us(pl.coalesce(k_start, trace.struct.field("coll_start_ts"))),
        end=us(pl.coalesce(k_stop, trace.struct.field("coll_stop_ts"))),
        channels=kernels.list.len().cast(pl.Int64),
        format_version=m.struct.field("inspector_output_format_version"),
    ).filter(pl.col("coll").is_not_null())


# Inspector's collective names -> the op vocabulary of profile kernels (postmortem.parsers.nsys.COLLECTIVE_OP).
_OPS = {"AllReduce": "allreduce", "AllGather": "allgather", "ReduceScatter": "reduce_scatter",
        "Broadcast": "broadcast", "Reduce": "reduce", "AlltoAll": "alltoall", "Send": "sendrecv", "Recv": "sendrecv"}


def _kernels(records: pl.DataFrame) -> pl.DataFrame:
    from postmortem.parsers.nsys import KERNEL_SCHEMA

    dur = (pl.col("exec_time_us") * 1000).round(0).cast(pl.Int64)
    world = records["n_ranks"].max()
    rows = records.select(
        "line_no", source=pl.lit("inspector"), pid="pid", start="start", end="end", dur_ns=dur,
        name=pl.concat_str([pl.lit("inspector:"), pl.col("coll")]), is_nccl=pl.lit(True),
        collective=pl.col("coll"), op=pl.col("coll").replace_strict(_OPS, default=pl.col("coll").str.to_lowercase(), return_dtype=pl.String),
        pg=pl.col("comm_id"), seq="coll_sn",
        # the bytes the Inspector's own algbw stands for: algbw x time (its message size is the
        # per-rank buffer, n x that for gathers and scatters)
        bytes=(pl.col("algbw_gbs") * pl.col("exec_time_us") * 1e3).round(0).cast(pl.Int64),
        group_size="n_ranks", rank="rank",
        rank_source=pl.when(pl.col("n_ranks") == world).then(pl.lit("Inspector header (rank in the job-wide communicator)"))
        .otherwise(pl.lit("Inspector header (rank in its communicator)")),
        rank_confidence=pl.when(pl.col("n_ranks") == world).then(pl.lit("derived")).otherwise(pl.lit("guessed")),
        host="hostname")
    return conform(rows, {"line_no": pl.UInt32, **KERNEL_SCHEMA})


def _processes(records: pl.DataFrame) -> pl.DataFrame:
    """The job-wide communicator's rank of each process (host, pid): a ``derived`` mapping."""
    world = records["n_ranks"].max()
    rows = records.filter(pl.col("n_ranks") == world).unique(["hostname", "pid"], keep="first", maintain_order=True)
    return rows.select(pid="pid", name=pl.lit(None, dtype=pl.String), device=pl.lit(None, dtype=pl.Int64),
                       kernels=pl.lit(None, dtype=pl.UInt32), rank="rank",
                       rank_source=pl.lit("NCCL Inspector: rank in the job-wide communicator"),
                       rank_confidence=pl.lit("derived"), local_rank=pl.lit(None, dtype=pl.Int64),
                       host="hostname", source=pl.lit("inspector"))
