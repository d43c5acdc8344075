"""Every error NCCL stated, in one table: its WARN lines and the NCCL errors PyTorch wrapped.

``nccl_errors`` holds one row per stated error, whatever carried it:

* an ``NCCL WARN`` line (``events`` kind ``nccl_warn``, classified by ``postmortem.parsers.nccl``);
* the NCCL text inside a PyTorch error (``postmortem.parsers.c10d``): ``NCCL error in: FILE:LINE, <result
  string>, NCCL version X`` (a ``DistBackendError``, a ``terminate called ... what():``, the
  watchdog's ``NCCL watchdog thread terminated with exception: NCCL error: ...``), the
  ``ncclSystemError: ...`` / ``ncclRemoteError: ...`` interpretation line, and the text on the
  line after ``Last error:`` (NCCL's last WARN message), and ``NCCL communicator was aborted
  on rank R. Original reason for failure was: ...``.

Each row gets the catalogue's reading (``postmortem.parsers.nccl_errors``: ``cause``, ``error_class``,
``role``, ``location`` (the catalogue's ``where``), ``category``, ``meaning``, ``action``), the fields its text states
(``peer_rank``, ``peer``, ``errno_text`` / ``errno_name`` / ``errno``, ``result_code`` /
``result``, ``bytes``) and where it was printed (``rank``, ``node``, ``host``, ``pid``,
``cuda_dev``, ``attempt``, ``ts``). ``first_on_process`` marks, per process (its host and pid,
or its input and rank for wrapped texts), the first row in file order whose role is ``cause``:
the first WARN before a ``-> N`` chain is the root cause on that process (nccl.md 3.10).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers import nccl_errors as catalogue
from postmortem.parsers.kinds import possible_kinds

SCHEMA = {"input_id": pl.UInt32, "line_no": pl.UInt32, "attempt": pl.Int64, "ts": pl.Datetime("us"),
          "rank": pl.Int64, "node": pl.String, "host": pl.String, "pid": pl.Int64, "cuda_dev": pl.Int64,
          "source": pl.String, "src_file": pl.String, "cause": pl.String, "error_class": pl.String,
          "role": pl.String, "location": pl.String, "category": pl.String, "meaning": pl.String, "action": pl.String,
          "message": pl.String, "peer_rank": pl.Int64, "peer": pl.String, "errno_text": pl.String,
          "errno_name": pl.String, "errno": pl.Int64, "result_code": pl.Int64, "result": pl.String,
          "bytes": pl.Int64, "first_on_process": pl.Boolean}

_WRAPPED_KINDS = ["nccl_error", "terminate", "watchdog_exception", "exception", "store_error"]
# PyTorch's NCCL text: the result string, the interpretation line, an abort with its original reason.
_WRAPPED_TEXT = r"NCCL error|nccl[A-Z]\w*Error|Unknown NCCL error|NCCL communicator was aborted"


def _col(frame: pl.DataFrame, name: str, dtype) -> pl.Expr:
    return pl.col(name) if name in frame.columns else pl.lit(None, dtype=dtype)


def build(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    events = tables.get("events")
    if events is None or events.is_empty() or "kind" not in events.columns:
        return {"nccl_errors": pl.DataFrame(schema=SCHEMA)}
    base = {c: _col(events, c, t) for c, t in SCHEMA.items()
            if c in ("input_id", "line_no", "attempt", "ts", "rank", "node", "host", "pid", "cuda_dev", "src_file")}
    message = _col(events, "message", pl.String)
    detail = _col(events, "detail", pl.String)
    warns = events.filter(pl.col("kind") == "nccl_warn").select(
        **base, source=pl.lit("NCCL WARN"), message=message, cause=_col(events, "cause", pl.String),
        error_class=_col(events, "error_class", pl.String))
    # Wrapped texts: the `Last error:` row carries NCCL's text as its detail; a `NCCL error in:` row
    # has the result string as its detail; the others are read whole.
    text = (pl.when(message.str.contains(r"^\s*Last error:\s*$")).then(detail)
            .when(pl.col("kind") == "nccl_error").then(pl.coalesce(detail, message))
            .otherwise(message))
    wrapped = events.lazy().filter(pl.col("kind").is_in(_WRAPPED_KINDS)).with_columns(_t=text).filter(
        pl.col("_t").is_not_null() & (pl.col("_t").str.contains(_WRAPPED_TEXT) | (pl.col("kind") == "nccl_error"))
    ).collect(engine="in-memory")
    parts = [warns]
    if not wrapped.is_empty():
        cause, klass = catalogue.classify(pl.col("_t"), possible=possible_kinds(wrapped, "_t", catalogue.CAUSES))
        parts.append(wrapped.select(**base, source=pl.lit("PyTorch's NCCL error"), message=pl.col("_t"),
                                    cause=cause, error_class=klass).filter(pl.col("cause").is_not_null()))
    rows = pl.concat([p.cast({k: v for k, v in SCHEMA.items() if k in p.columns}) for p in parts], how="diagonal_relaxed")
    if rows.is_empty():
        return {"nccl_errors": pl.DataFrame(schema=SCHEMA)}
    meta = {field: {c.name: getattr(c, "where" if field == "location" else field) for c in catalogue.CAUSES}
            for field in ("role", "location", "category", "meaning", "action")}
    cause = pl.col("cause")
    rows = rows.with_columns(
        role=cause.replace_strict(meta["role"], default="unknown", return_dtype=pl.String),
        **{f: cause.replace_strict(meta[f], default=None, return_dtype=pl.String)
           for f in ("location", "category", "meaning", "action")},
        error_class=pl.col("error_class").fill_null("other"),
        **catalogue.fields(pl.col("message")))
    process = [pl.col("input_id"), pl.coalesce(pl.col("host"), pl.lit("")),
               pl.coalesce(pl.col("pid").cast(pl.String), pl.col("rank").cast(pl.String), pl.lit(""))]
    rows = rows.sort("input_id", "line_no").with_columns(
        first_on_process=(pl.col("role") == "cause")
        & (pl.col("line_no") == pl.col("line_no").filter(pl.col("role") == "cause").min().over(process)))
    return {"nccl_errors": rows.select(list(SCHEMA)).cast(SCHEMA)}
