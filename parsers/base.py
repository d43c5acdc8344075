"""The contract every parser follows, and the few helpers they share.

A parser is a module with

* ``NAME`` -- a short kind name (``"c10d"``, ``"nccl"``, ...), used as ``lines.kind``;
* ``SAMPLE_LINES`` -- message texts (after the envelope is peeled) it must understand; the
  test suite feeds them through ``parse`` and checks every one is consumed;
* ``parse(lines: pl.DataFrame) -> ParseResult`` -- takes the envelope frame of one input
  (``postmortem.parsers.lines.envelope``: ``line_no``, ``text`` and the prefix columns) and returns
  tables keyed by name plus the ``line_no`` values it understood.

Parsers never decide global ranks, nodes or attempts: they report what a line says (a PG
rank, an NCCL communicator rank, a pid) with its ``line_no``; ``postmortem.analyzer.identity`` joins
that to the envelope's prefixes and the input's path. Rows of every table carry
``line_no`` so a finding can always cite its line.

Whole-file, vectorised: a parser filters with literals first (a parser that reads many kinds
of line routes once: ``lines.any_literal``, ``lines.with_stream_where``) and then uses
a few small regexes on the survivors. No Python loop over lines.

A whole-file parser (``postmortem.parsers.WHOLE_FILE``: a format read as one document, not as
lines) is a module with

* ``NAME`` -- the input kind it gives (``inputs.kind``) and the ``parser`` of its rows;
* ``LABEL`` -- how messages name the format ("Flight Recorder");
* ``sniff(name, head, data) -> bool`` -- whether an input is this format (or claims to be, so
  that its refusal is the one the user reads): ``name`` is the input's file name (the last part
  of its display name), ``head`` its first 64 KiB past leading NUL bytes, ``data`` everything
  read to sniff it (4 MiB of a plain file, all of a compressed one);
* ``read_whole(source: WholeFile) -> (tables, problems)`` -- its tables (with ``line_no``) and
  the problems worth telling the user; ``Unreadable`` (message naming the file) refuses it.

``postmortem.analyzer.discover.sniff`` asks them in registry order; ``postmortem.analyzer.ingest``
hands the input to the one that claimed it. Neither knows a format.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import polars as pl


@dataclass
class ParseResult:
    tables: dict[str, pl.DataFrame] = field(default_factory=dict)
    consumed: pl.Series = field(default_factory=lambda: pl.Series("line_no", [], dtype=pl.UInt32))


@dataclass(frozen=True)
class WholeFile:
    """A whole-file input as ingest hands it to its parser's ``read_whole``."""
    display: str                    # its name in reports (an archive member: ``archive!/member``)
    head: bytes                     # its bytes from the first that is not NUL, as far as sniffing read them
    path: Path | None               # the file, stored plain, for a format read in place (a database); None
                                    # when the input is compressed (only ``data`` holds its bytes)
    data: Callable[[], bytes]       # its bytes, decompressed, at most the whole-file budget (else ``Unreadable``)


class Unreadable(Exception):
    """A whole-file parser's refusal: the input is not a readable instance of its format. The
    message names the input and says why; the input is skipped with it."""


def consumed_of(*frames: pl.DataFrame | pl.Series) -> pl.Series:
    """The union of the ``line_no`` columns of ``frames`` (a Series is line numbers itself: a
    parser hands over its frames, or a column, without selecting ``line_no`` in a call each)."""
    parts = [f if isinstance(f, pl.Series) else f["line_no"] for f in frames if f is not None and not f.is_empty()]
    if not parts:
        return pl.Series("line_no", [], dtype=pl.UInt32)
    return pl.concat(parts).unique().cast(pl.UInt32)


# glog header written by c10 logging and by torch.distributed.elastic's Python logging:
#   E909 09:55:29.307629539 ProcessGroupNCCL.cpp:607]      (>= 2.4, inside brackets; the month
#                                                           is not zero-padded: E909, W112)
#   E ProcessGroupNCCL.cpp:1537]                            (<= 2.3: no date or time)
#   E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984]
GLOG = (
    r"(?P<sev>[IWEF])(?:(?P<mmdd>\d{3,4}) (?P<hms>\d{2}:\d{2}:\d{2})(?:\.(?P<frac>\d+))?)?"
    r"(?: (?P<gpid>\d+))? ?(?P<src>[\w./-]+):(?P<srcline>\d+)\]"
)


def glog_timestamp(mmdd: pl.Expr, hms: pl.Expr, frac: pl.Expr) -> pl.Expr:
    """A glog ``MMDD HH:MM:SS.frac`` as a Datetime in the placeholder year 2000.

    glog never prints the year; ``postmortem.analyzer.timeline`` replaces the placeholder with a year
    taken from the run's other clocks and records how it did so. The fraction is cut to
    microseconds (c10's nine digits come from a monotonic clock in some builds, so the
    sub-second part is approximate anyway).
    """
    micro = frac.fill_null("0").str.slice(0, 6).str.pad_end(6, "0")
    text = pl.concat_str([pl.lit("2000"), mmdd.str.pad_start(4, "0"), pl.lit(" "), hms, pl.lit("."), micro])
    # Six digits always, so a fixed-width fraction (%6f): half the time of %.f, the same values.
    return text.str.strptime(pl.Datetime("us"), "%Y%m%d %H:%M:%S.%6f", strict=False)


def to_int(expr: pl.Expr) -> pl.Expr:
    """Parse an integer field; garbage and out-of-range values become null, never raise."""
    return expr.cast(pl.Int64, strict=False)


def among(values: pl.Series) -> pl.Expr:
    """``values`` as the one list ``is_in`` (or ``str.extract_many``) reads, built inside the query
    that reads it: ``Series.implode()`` would be an eager Polars call of its own (about 0.1 ms, as
    much as the filter that uses it, on the frames of a sample run)."""
    return pl.lit(values).implode()


def conform(frame: pl.DataFrame, schema: dict) -> pl.DataFrame:
    """``frame`` with exactly ``schema``'s columns: regex-captured strings become integers where
    the schema says Int64 (garbage -> null), missing columns are null, extra columns dropped."""
    if not any(name in frame.columns for name in schema):
        return frame.select(_conformed(frame.schema, schema))   # literals only: one row, as Polars gives
    # Column by column, as Series: the same casts as ``_conformed`` without a Polars query, whose
    # start costs more than the casts of a parser's frame (parsers conform about 30 frames a run).
    return pl.DataFrame([_conformed_column(frame, name, dtype) for name, dtype in schema.items()])


def nulls(name: str, dtype, height: int) -> pl.Series:
    """A column of ``height`` nulls of ``dtype``, made without a Polars query (a ``pl.lit`` added
    by ``with_columns`` is one)."""
    return pl.Series(name, [None], dtype=dtype).new_from_index(0, height)


def _conformed_column(frame: pl.DataFrame, name: str, dtype) -> pl.Series:
    if name not in frame.columns:
        return nulls(name, dtype, frame.height)
    column = frame[name]
    for step in _casts(column.dtype, dtype):
        column = column.cast(step, strict=False)
    return column


def _casts(have, dtype) -> list:
    """The lenient casts that take a column of type ``have`` to ``dtype``: a regex-captured string
    goes through Int64 where an integer is wanted (``to_int``)."""
    return [pl.Int64, dtype] if dtype == pl.Int64 and have == pl.String else [dtype]


def conform_lazy(plan: pl.LazyFrame, schema: dict) -> pl.LazyFrame:
    """``conform`` of a plan, to be collected with others (``collect_each``)."""
    return plan.select(_conformed(plan.collect_schema(), schema))


def groups_of(frame: pl.DataFrame, *by, maintain_order: bool = False):
    """``frame.group_by(*by, maintain_order=...)`` iterated: (the key as a tuple, the group's rows)
    per group, as Polars gives them, found by one query where Polars' own iteration makes three
    (a rule iterates a table's groups once a report, and a small query costs more than its work)."""
    index = "__groups_of_row"
    frame = frame.rechunk()     # each group is a gather of rows: from one chunk, as Polars does
    found = (frame.lazy().with_row_index(index).group_by(*by, maintain_order=maintain_order)
             .agg(pl.col(index)).collect(engine="in-memory"))
    keys = found[[name for name in found.columns if name != index]].iter_rows()
    return ((key, frame[rows]) for key, rows in zip(keys, found[index]))


def collect_each(plans: list[pl.LazyFrame]) -> list[pl.DataFrame]:
    """Several small queries in one Polars call (each eager call on a small frame costs more than
    its work), on the in-memory engine: Polars 2 runs ``collect`` and ``collect_all`` on its
    streaming engine by default, whose start costs more still (the line-order checks of a
    sample's 33 tables: 127 ms streaming, 5 ms in memory, 10 ms as 33 eager calls)."""
    return pl.collect_all(plans, engine="in-memory") if plans else []


def conform_all(frames: dict[str, pl.DataFrame], schemas: dict[str, dict]) -> dict[str, pl.DataFrame]:
    """``conform`` of each frame to its table's schema, all in one Polars call."""
    names = list(frames)
    return dict(zip(names, collect_each([conform_lazy(frames[name].lazy(), schemas[name]) for name in names])))


def _conformed(have: pl.Schema, schema: dict) -> list[pl.Expr]:
    columns = []
    for name, dtype in schema.items():
        if name not in have:
            columns.append(pl.lit(None, dtype=dtype).alias(name))
            continue
        value = pl.col(name)
        for step in _casts(have[name], dtype):
            value = value.cast(step, strict=False)
        columns.append(value.alias(name))
    return columns
