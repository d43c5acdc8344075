"""PyTorch profiler / Kineto Chrome traces (``*.pt.trace.json[.gz]``) -> kernels, cpu_ops.

Format reference: ``docs/formats/nsys-and-traces.md`` section 8.

* **Time.** ``ts``/``dur`` are microseconds (floats with ns precision). Newer traces carry a
  top-level ``baseTimeNanoseconds`` and relative ``ts``: ``epoch_ns = base + round(ts*1000)``.
  Older traces (2022-2023) have no base and ``ts`` is already epoch us. A trace with neither
  (relative ``ts``, no base) keeps null wall times and says so. The integer and fractional
  parts are converted separately, so epoch-us values (~1.7e15) keep ns exactness.
* **Rank.** ``distributedInfo.rank`` (certain); missing -> the file name's ``rank<N>`` (derived).
* **NCCL kernels** (``cat == "kernel"``, ``pid`` = device, ``tid`` = stream): the name's
  family as for nsys (``postmortem.parsers.nsys.kernel_fields``) plus Kineto's args copied from
  ``record_param_comms``: ``Collective name``, ``In/Out msg nelems``, ``dtype``, ``Group size``,
  ``Process Group Name/Description/Ranks``, ``Seq`` where present. Older traces have no
  such args: collective and type then come from the kernel name, the group size from
  ``distributedInfo.world_size``.
* **CPU ops** (``cpu_op``, ``user_annotation``): name, pid, tid, start/end, ``External id``.
* **Memory** (``profile_memory=True``): ``[memory]`` instants on CUDA devices -> ``gpu_memory``
  (bytes, allocated and reserved totals).
* **Launches** (``cuda_runtime``/``cuda_driver``): joined to kernels by ``correlation`` (unique
  within the trace's process) for the launching pid/tid, API and launch time.

The JSON is parsed once by the standard library; only the kernel and CPU-op events are
turned into columns (Kineto traces are per-rank files of 10^4-10^6 events).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import polars as pl

from postmortem.parsers.base import Unreadable, WholeFile
from postmortem.parsers.nsys import KERNEL_SCHEMA, TYPE_BYTES, kernel_fields

NAME = "kineto"
LABEL = "Kineto"

DTYPES = {"Float": "f32", "BFloat16": "bf16", "Half": "f16", "Double": "f64", "Int": "i32", "Long": "i64",
          "Short": "i16", "Byte": "u8", "Char": "i8", "Bool": "u8", "Float8_e4m3fn": "f8e4m3",
          "Float8_e5m2": "f8e5m2", "UInt32": "u32", "UInt64": "u64"}
COLLECTIVE_OPS = {
    "allreduce": "allreduce", "allreduce_coalesced": "allreduce", "barrier": "allreduce",
    "broadcast": "broadcast", "reduce": "reduce", "all_gather": "allgather", "_allgather_base": "allgather",
    "allgather_into_tensor_coalesced": "allgather", "allgather": "allgather", "reduce_scatter": "reduce_scatter",
    "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "all_to_all": "alltoall", "all_to_allv": "alltoall", "alltoall": "alltoall", "alltoall_base": "alltoall",
    "send": "send", "recv": "recv", "gather": "gather", "scatter": "scatter",
}
_ARGS = {"Collective name": "coll_arg", "In msg nelems": "numel_in", "Out msg nelems": "numel_out",
         "Group size": "group_size", "dtype": "dtype_arg", "Process Group Name": "pg",
         "Process Group Description": "pg_desc", "Process Group Ranks": "group_ranks", "Seq": "seq",
         "correlation": "correlation", "stream": "stream", "device": "device", "External id": "external_id"}
_INT_ARGS = {"numel_in", "numel_out", "group_size", "seq", "correlation", "stream", "device", "external_id",
             "bytes", "in_use_bytes", "reserved_bytes"}
_I64_MIN, _I64_MAX = -2**63, 2**63 - 1


def _is_i64(value) -> bool:
    """A JSON integer (not a bool) that fits Int64."""
    return isinstance(value, int) and not isinstance(value, bool) and _I64_MIN <= value <= _I64_MAX


def _show(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


class KinetoError(Unreadable):
    """Not a readable Kineto trace; the message names the file and why."""


def sniff(name: str, head: bytes, data: bytes) -> bool:
    """A JSON object with ``"traceEvents"`` in its first 4 MiB (the whole-file hook,
    ``postmortem.parsers.base``)."""
    return head.lstrip()[:1] == b"{" and b'"traceEvents"' in data[:1 << 22]


def read_whole(source: WholeFile) -> tuple[dict[str, pl.DataFrame], list[str]]:
    """``read`` of the input's bytes."""
    return read(source.data(), source.display)


def read(data: bytes, display: str) -> tuple[dict[str, pl.DataFrame], list[str]]:
    try:
        top = json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise KinetoError(f"{display}: not valid JSON ({exc}); a truncated profiler trace? skipped") from exc
    if not isinstance(top, dict) or not isinstance(top.get("traceEvents"), list):
        raise KinetoError(f"{display}: JSON without a traceEvents list; not a Kineto trace; skipped")
    problems: list[str] = []
    events = top["traceEvents"]
    base = top.get("baseTimeNanoseconds")
    if base is not None and not (_is_i64(base) and base >= 0):
        problems.append(f"baseTimeNanoseconds {_show(base)} is not a non-negative Int64 integer; ignored "
                        "(wall times then depend on ts alone)")
        base = None
    dist = top.get("distributedInfo") if isinstance(top.get("distributedInfo"), dict) else {}
    rank, rank_source, confidence = dist.get("rank"), "distributedInfo.rank in the trace", "certain"
    if rank is not None and not (_is_i64(rank) and rank >= 0):
        problems.append(f"distributedInfo.rank {_show(rank)} is not a non-negative Int64 integer; ignored")
        rank = None
    if rank is None:
        match = re.search(r"rank[_-]?(\d+)", Path(display).name, re.I)
        if match and not _is_i64(int(match.group(1))):
            match = None
        rank, rank_source, confidence = (int(match.group(1)), "rank number in the trace's file name", "derived") \
            if match else (None, None, None)
        problems.append("trace has no distributedInfo.rank" + ("; rank taken from the file name" if match else ""))
    world = dist.get("world_size")
    if world is not None and not (_is_i64(world) and world >= 0):
        problems.append(f"distributedInfo.world_size {_show(world)} is not a non-negative Int64 integer; ignored")
        world = None
    host = top.get("host_name")
    if host is not None and not isinstance(host, str):
        problems.append(f"host_name {_show(host)} is not a string; ignored")
        host = None
    backend = dist.get("backend")
    if backend is not None and not isinstance(backend, str):
        problems.append(f"distributedInfo.backend {_show(backend)} is not a string; ignored")
        backend = None

    kernels = [e for e in events if isinstance(e, dict) and e.get("cat") == "kernel" and e.get("ph") == "X"]
    cpu = [e for e in events if isinstance(e, dict) and e.get("cat") in ("cpu_op", "user_annotation")
           and e.get("ph") == "X"]
    epoch_ts = _epoch_mode(kernels + cpu, base, problems)
    out: dict[str, pl.DataFrame] = {}
    launches = [e for e in events if isinstance(e, dict) and e.get("cat") in ("cuda_runtime", "cuda_driver")
                and e.get("ph") == "X" and isinstance(e.get("args"), dict) and "correlation" in e["args"]]
    if kernels:
        k = _kernel_frame(kernels, base, epoch_ts, problems)
        if launches:
            # kernel -> launching runtime call by correlation id (one process per trace): the
            # launching pid/tid, the API name and when it was called
            rt = _frame(launches, base, epoch_ts, {"correlation": "correlation"}, problems, "launch").select(
                "correlation", _pid="pid", _tid="tid", _api="name", _launch="start").unique("correlation", keep="first")
            k = k.join(rt, on="correlation", how="left").with_columns(
                pid=pl.col("_pid"), tid=pl.col("_tid"), launch_api=pl.col("_api"), launch_start=pl.col("_launch"),
            ).drop("_pid", "_tid", "_api", "_launch")
        k = k.join(kernel_fields(k["name"]), on="name", how="left")
        coll = pl.col("coll_arg").replace_strict(COLLECTIVE_OPS, default=None, return_dtype=pl.String)
        dtype = pl.coalesce(pl.col("dtype_arg").replace_strict(DTYPES, default=None, return_dtype=pl.String),
                            pl.col("dtype"))
        k = k.with_columns(
            is_nccl=pl.col("is_nccl").fill_null(False) | pl.col("coll_arg").is_not_null(),
            op=pl.when(pl.col("coll_arg").is_not_null()).then(coll).otherwise(pl.col("op")),
            collective=pl.coalesce(pl.col("coll_arg"), pl.col("collective")),
            dtype=dtype,
            group_size=pl.coalesce(pl.col("group_size"), pl.lit(world, dtype=pl.Int64)),
        )
        size = dtype.replace_strict(TYPE_BYTES, default=None, return_dtype=pl.Int64)
        k = k.with_columns(bytes=pl.max_horizontal("numel_in", "numel_out") * size, source=pl.lit("kineto"),
                           rank=pl.lit(rank, dtype=pl.Int64), rank_source=pl.lit(rank_source, dtype=pl.String),
                           rank_confidence=pl.lit(confidence, dtype=pl.String),
                           host=pl.lit(host, dtype=pl.String))
        extra = [c for c in ("pg_desc",) if c in k.columns]
        missing = [pl.lit(None, dtype=t).alias(c) for c, t in KERNEL_SCHEMA.items() if c not in k.columns]
        out["kernels"] = k.with_columns(missing).select(list(KERNEL_SCHEMA) + extra).sort("start")
    if cpu:
        c = _frame(cpu, base, epoch_ts, {"External id": "external_id", "Sequence number": "seq_nr"}, problems,
                   "CPU-op")
        out["cpu_ops"] = c.with_columns(source=pl.lit("kineto"), rank=pl.lit(rank, dtype=pl.Int64)).sort("start")
    memory = _memory(events, base, epoch_ts, problems)
    if not memory.is_empty():
        out["gpu_memory"] = memory.with_columns(rank=pl.lit(rank, dtype=pl.Int64))
    out["profile_processes"] = pl.DataFrame({
        "pid": [None], "name": [None], "device": [None], "kernels": [len(kernels)], "rank": [rank],
        "rank_source": [rank_source], "rank_confidence": [confidence], "local_rank": [None],
        "host": [host], "source": ["kineto"]},
        schema={"pid": pl.Int64, "name": pl.String, "device": pl.Int64, "kernels": pl.UInt32, "rank": pl.Int64,
                "rank_source": pl.String, "rank_confidence": pl.String, "local_rank": pl.Int64, "host": pl.String,
                "source": pl.String})
    out["profile_info"] = pl.DataFrame({
        "source": ["kineto"], "product_version": [None], "schema_version": [str(top.get("schemaVersion"))],
        "host": [host],
        "session_start": [pl.Series([base], dtype=pl.Int64).cast(pl.Datetime("ns"), strict=False)[0]
                          if base else None],
        "time_base": ["baseTimeNanoseconds + relative us" if base else
                      ("epoch us (no baseTimeNanoseconds)" if epoch_ts else "relative us; no wall time")],
        "rank": [rank], "world_size": [world], "backend": [backend]},
        schema_overrides={"rank": pl.Int64, "world_size": pl.Int64, "backend": pl.String,
                          "session_start": pl.Datetime("ns"), "product_version": pl.String, "host": pl.String})
    return out, problems


def _epoch_mode(events: list[dict], base, problems: list[str]) -> bool:
    if base:
        return False
    sample = [e.get("ts") for e in events[:100] if isinstance(e.get("ts"), (int, float))
              and not isinstance(e.get("ts"), bool) and math.isfinite(e.get("ts"))]
    if sample and min(sample) > 1e14:     # after 1973 in us: epoch us
        return True
    problems.append("no baseTimeNanoseconds and ts is not epoch us: wall times unknown (relative times kept)")
    return False


_LIMIT = 9.2e18     # |ns| below this (Int64 max ~9.223e18) leaves room for float error


def _fits(us: pl.Expr, base) -> pl.Expr:
    """``us`` (float us) converts to Int64 ns, also after adding ``base`` (NaN/inf -> false)."""
    return (us.abs() * 1000 < _LIMIT) & ((us * 1000 + float(base or 0)).abs() < _LIMIT)


def _epoch_ns(ts: pl.Expr, base, epoch_ts: bool) -> pl.Expr:
    """us float -> epoch ns, integer and fraction apart (float64 cannot hold epoch ns)."""
    # a ts whose epoch ns would not fit Int64 (or NaN/inf) gives null: Int64 arithmetic wraps
    # silently, so the range is tested in float first (with a wide margin), and casts are non-strict
    whole = pl.when(_fits(ts, base)).then(ts.floor())
    ns = whole.cast(pl.Int64, strict=False) * 1000 + ((ts - whole) * 1000).round(0).cast(pl.Int64, strict=False)
    if base:
        return ns + base
    return ns if epoch_ts else pl.lit(None, dtype=pl.Int64)


def _frame(events: list[dict], base, epoch_ts: bool, args: dict[str, str], problems: list[str],
           what: str) -> pl.DataFrame:
    cols: dict[str, list] = {"name": [], "pid": [], "tid": [], "ts": [], "dur": []}
    arg_cols: dict[str, list] = {v: [] for v in args.values()}
    bad: dict[str, list] = {}     # field -> the unusable values (present, wrong type or out of Int64 range)

    def checked(field: str, value):
        if value is None or _is_i64(value):
            return value
        bad.setdefault(field, []).append(value)
        return None

    def number(field: str, value):
        if value is None:
            return None
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        bad.setdefault(field, []).append(value)
        return None

    for e in events:
        name = e.get("name")
        cols["name"].append(name if name is None or isinstance(name, str) else str(name))
        cols["pid"].append(checked("pid", e.get("pid")))
        cols["tid"].append(checked("tid", e.get("tid")))
        cols["ts"].append(number("ts", e.get("ts")))
        cols["dur"].append(number("dur", e.get("dur")))
        a = e.get("args") if isinstance(e.get("args"), dict) else {}
        for key, col in args.items():
            value = a.get(key)
            if col in _INT_ARGS or col in ("seq_nr",):
                value = checked(f"args.{key}", value)
            elif value is not None:
                value = str(value)
            arg_cols[col].append(value)
    for field, values in bad.items():
        problems.append(f"{len(values)} {what} event(s) with a {field} that is not an Int64 "
                        f"{'number' if field in ('ts', 'dur') else 'integer'} (e.g. {_show(values[0])}); "
                        "set to null")
    schema = {"name": pl.String, "pid": pl.Int64, "tid": pl.Int64, "ts": pl.Float64, "dur": pl.Float64}
    schema |= {c: (pl.Int64 if c in _INT_ARGS or c == "seq_nr" else pl.String) for c in arg_cols}
    frame = pl.DataFrame(cols | arg_cols, schema=schema)
    start = _epoch_ns(pl.col("ts"), base, epoch_ts)
    # strict=False everywhere: an out-of-range/NaN/inf ts or dur gives a null time, not an error
    ts, dur = pl.col("ts"), pl.col("dur")
    dur_ok = _fits(dur, 0)
    dur_ns = pl.when(dur_ok).then((dur * 1000).round(0)).cast(pl.Int64, strict=False)
    end = pl.when(_fits(ts + dur, base)).then(start + dur_ns)
    frame = frame.with_columns(start=start.cast(pl.Datetime("ns"), strict=False),
                               end=end.cast(pl.Datetime("ns"), strict=False), dur_ns=dur_ns, ts_us=ts)
    lost = frame.select(ts=(ts.is_not_null() & ~_fits(ts, base)).sum(),
                        dur=(dur.is_not_null() & ~dur_ok).sum()).row(0)
    for field, count in zip(("ts", "dur"), lost):
        if count:
            problems.append(f"{count} {what} event(s) with a {field} that is not finite or is out of range; "
                            f"their {'start/end' if field == 'ts' else 'duration/end'} set to null")
    return frame.drop("ts", "dur")


def _kernel_frame(events: list[dict], base, epoch_ts: bool, problems: list[str]) -> pl.DataFrame:
    k = _frame(events, base, epoch_ts, _ARGS, problems, "kernel")
    return k.with_columns(
        name=pl.col("name").str.split("(").list.first(), full_name=pl.col("name"),
        device=pl.coalesce("device", "pid"), stream=pl.coalesce("stream", "tid"),
    ).drop("pid").with_columns(pid=pl.lit(None, dtype=pl.Int64), tid=pl.lit(None, dtype=pl.Int64))


def _memory(events: list[dict], base, epoch_ts: bool, problems: list[str]) -> pl.DataFrame:
    """``profile_memory=True``: ``[memory]`` instants on CUDA devices -> allocations (+) and
    frees (-) with the caching allocator's allocated and reserved totals after each."""
    rows = [e for e in events if isinstance(e, dict) and e.get("name") == "[memory]" and e.get("ph") == "i"
            and isinstance(e.get("args"), dict) and e["args"].get("Device Type") == 1]
    if not rows:
        return pl.DataFrame()
    f = _frame(rows, base, epoch_ts, {"Device Id": "device", "Bytes": "bytes", "Total Allocated": "in_use_bytes",
                                      "Total Reserved": "reserved_bytes"}, problems, "[memory]")
    ints = ["device", "bytes", "in_use_bytes", "reserved_bytes"]
    return f.with_columns([pl.col(c).cast(pl.Int64, strict=False) for c in ints]).select(
        "pid", "device", ts="start", operation=pl.when(pl.col("bytes") < 0).then(pl.lit("free")).otherwise(pl.lit("alloc")),
        bytes=pl.col("bytes").abs(), in_use_bytes="in_use_bytes", reserved_bytes="reserved_bytes",
        source=pl.lit("kineto")).sort("ts")
