"""Clock fixes: the year glog never prints, and the attempt of rows that only have a time.

glog headers (c10d, the elastic agent) carry month, day and time but no year; parsers give
them the placeholder year 2000. The year comes from the run's full timestamps (Megatron's
datetime, torchrun's failure table, Slurm's CANCELLED AT) and, failing those, from the
inputs' modification times. The choice and its source go into the report.
"""

from __future__ import annotations

import calendar
from collections import Counter
from datetime import datetime, timezone

import polars as pl

from postmortem.analyzer import store
from postmortem.parsers.base import collect_each
from postmortem.parsers.nccl import COLL_KIND

PLACEHOLDER_YEAR = 2000
# The placeholder year's bounds, made once: each datetime literal costs Polars a call of its own.
_YEAR_START, _LEAP_DAY, _MARCH, _YEAR_END = (pl.lit(datetime(*day)) for day in (
    (PLACEHOLDER_YEAR, 1, 1), (PLACEHOLDER_YEAR, 2, 29), (PLACEHOLDER_YEAR, 3, 1), (PLACEHOLDER_YEAR + 1, 1, 1)))


def reference_year(tables: dict[str, pl.DataFrame], mtimes: list[float]) -> tuple[int, str]:
    # each time column's rows per year, and whether a glog 0229 is among them (the logs are from a
    # leap year), for every table in one Polars call (two or three per table cost more than the work)
    plans = [frame.lazy().select(t=pl.col(column)).drop_nulls()
             .group_by(year=pl.col("t").dt.year(), maintain_order=True)
             .agg(rows=pl.len(), leap_day=_leap_day_placeholder(pl.col("t")).any())
             for frame in tables.values() for column in ("ts", "time")
             if column in frame.columns and frame.schema[column] == pl.Datetime("us")]
    years: Counter[int] = Counter()
    leap_day = False
    for per_year in collect_each(plans):
        for year, rows, leap in per_year.iter_rows():
            if year != PLACEHOLDER_YEAR:
                years[year] += rows
            leap_day = leap_day or leap
    if years:
        year = years.most_common(1)[0][0]
        return year, f"year {year} taken from the run's full timestamps (training log, launcher, scheduler)"
    if mtimes:
        year = datetime.fromtimestamp(max(mtimes), tz=timezone.utc).year
        if leap_day and not calendar.isleap(year):
            leap = max(y for y in range(year - 4, year) if calendar.isleap(y))
            return leap, (f"year {leap} taken from the inputs' modification time ({year}) and the glog date 02-29, "
                          "which only a leap year has (no log line carries a year)")
        return year, f"year {year} taken from the inputs' modification time (no log line carries a year)"
    return PLACEHOLDER_YEAR, "no year anywhere in the inputs; times are shown without a reliable year"


def _leap_day_placeholder(column: pl.Expr) -> pl.Expr:
    return (column >= _LEAP_DAY) & (column < _MARCH)


def fix_years(tables: dict[str, pl.DataFrame], year: int) -> dict[str, pl.DataFrame]:
    """Placeholder years replaced by ``year`` in every table's times; a glog 02-29 in a year
    without one (the year came from the other timestamps, which disagree) has no time rather
    than a wrong one. The tables with times are fixed in one Polars call."""
    fixes = {name: _year_fixes(frame.schema, year) for name, frame in tables.items()}
    names = [name for name, exprs in fixes.items() if exprs]
    fixed = collect_each([tables[name].lazy().with_columns(fixes[name]) for name in names])
    return {**tables, **dict(zip(names, fixed))}


def _year_fixes(schema: pl.Schema, year: int) -> list[pl.Expr]:
    fixes = []
    for column in ("ts", "time"):
        if schema.get(column) == pl.Datetime("us"):
            value = pl.col(column)
            if not calendar.isleap(year):
                value = pl.when(_leap_day_placeholder(value)).then(None).otherwise(value)
            placeholder = (value >= _YEAR_START) & (value < _YEAR_END)
            # The year replaced by a shift (``dt.replace`` takes every time apart): the same days
            # from Jan 1 up to Feb 28 in every year, and from Mar 1 on (the placeholder year is a
            # leap year; its Feb 29 has no time in another year, above).
            before_march = datetime(year, 1, 1) - datetime(PLACEHOLDER_YEAR, 1, 1)
            from_march = datetime(year, 3, 1) - datetime(PLACEHOLDER_YEAR, 3, 1)
            shift = pl.when(value < _MARCH).then(pl.lit(before_march)).otherwise(pl.lit(from_march))
            fixes.append(pl.when(placeholder).then(value + shift).otherwise(value).alias(column))
    return fixes


def attempt_starts(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    parts = [t.select("attempt", "ts") for t in tables.values()
             if {"attempt", "ts"} <= set(t.columns) and t.schema["ts"] == pl.Datetime("us")]
    if not parts:
        return pl.DataFrame(schema={"attempt": pl.Int64, "start": pl.Datetime("us")})
    both = pl.concat(parts).drop_nulls()
    return both.group_by("attempt").agg(start=pl.col("ts").min()).sort("attempt")


def attempt_marks(tables: dict[str, pl.DataFrame]) -> pl.DataFrame:
    """Lines whose attempt is known, by position in their input; ``ends`` marks the launcher's
    ``failed (exitcode: N)`` line, the last line of its attempt."""
    parts = []
    for name, frame in tables.items():
        if not {"input_id", "line_no", "attempt"} <= set(frame.columns):
            continue
        ends = (pl.col("kind") == "worker_failed") if name == "agent" and "kind" in frame.columns else pl.lit(False)
        parts.append(frame.filter(pl.col("attempt").is_not_null()).select(
            pl.col("input_id").cast(pl.Int64), pl.col("line_no").cast(pl.Int64), pl.col("attempt").cast(pl.Int64),
            ends=ends.fill_null(False)))
    if not parts:
        return pl.DataFrame(schema={"input_id": pl.Int64, "line_no": pl.Int64, "attempt": pl.Int64, "ends": pl.Boolean})
    return (pl.concat(parts).group_by("input_id", "line_no")
            .agg(pl.col("attempt").max(), pl.col("ends").any()).sort("input_id", "line_no"))


def fill_attempts_by_position(frame: pl.DataFrame, marks: pl.DataFrame) -> pl.DataFrame:
    """Rows still without an attempt (no time of their own: tracebacks, torchrun's ``[defaultN]:``
    lines of a console that holds every attempt) take the attempt of the line before them in the
    same input, or, when that line ended its attempt (the launcher's ``failed``), of the line
    after them: the next attempt's first lines come after the last attempt's end."""
    if not {"input_id", "line_no", "attempt"} <= set(frame.columns) or marks.is_empty() \
            or frame["attempt"].null_count() == 0:
        return frame
    order = frame.with_row_index("_row")
    todo = (order.filter(pl.col("attempt").is_null())
            .select("_row", _in=pl.col("input_id").cast(pl.Int64), _ln=pl.col("line_no").cast(pl.Int64)).sort("_ln"))
    m = marks.rename({"input_id": "_in", "line_no": "_ln"})
    before = todo.join_asof(m, on="_ln", by="_in", strategy="backward", check_sortedness=False).rename({"attempt": "_b", "ends": "_end"})
    after = todo.join_asof(m.drop("ends"), on="_ln", by="_in", strategy="forward", check_sortedness=False).select("_row", _f="attempt")
    fills = before.join(after, on="_row").select(
        "_row", _a=pl.when(pl.col("_end").fill_null(False) & pl.col("_f").is_not_null()).then("_f")
        .otherwise(pl.coalesce("_b", "_f")))
    out = order.join(fills, on="_row", how="left").with_columns(attempt=pl.coalesce("attempt", "_a"))
    return out.sort("_row").drop("_row", "_a")


def fill_attempts(frame: pl.DataFrame, starts: pl.DataFrame) -> pl.DataFrame:
    """Rows with no attempt get the latest attempt that had started by their time."""
    if "attempt" not in frame.columns:
        return frame
    if "ts" not in frame.columns or starts.is_empty():
        return frame
    order = frame.with_row_index("_row")
    timed = order.filter(pl.col("attempt").is_null() & pl.col("ts").is_not_null()).sort("ts")
    if timed.is_empty():
        return frame
    matched = timed.join_asof(starts.sort("start"), left_on="ts", right_on="start", strategy="backward")
    fills = matched.select("_row", _a=pl.col("attempt_right"))
    out = order.join(fills, on="_row", how="left").with_columns(attempt=pl.coalesce("attempt", "_a"))
    return out.drop("_row", "_a")


# The tables whose rows carry the time of a line of the job's own logs (kernel logs are the
# nodes', not the job's: a journal can run on for days after the job ended).
LOG_TIME_TABLES = (("events", "ts", "a rank's log"), ("progress", "ts", "a c10d status line"),
                   ("iterations", "ts", "the training log"), ("collectives", "ts", "a collective record"),
                   ("exits", "time", "torchrun's failure table"), ("agent", "ts", "the torchrun agent"),
                   ("slurm", "ts", "the scheduler's output"))


def log_bounds(run, attempt: int | None = None) -> tuple[dict | None, dict | None]:
    """The first and the last time any line of the job's logs carries (in ``attempt`` and lines of
    no attempt, or the whole run), each as ``{"ts", "path", "line", "what"}``: the one start and
    the one end every view of the report gives, with the line it comes from. Read once per run
    and attempt (about 17 queries; a report asks three to five times)."""
    bounds = run.derived(("log_bounds", attempt), lambda: _log_bounds(run, attempt))
    return tuple(dict(bound) if bound else bound for bound in bounds)


def _log_bounds(run, attempt: int | None) -> tuple[dict | None, dict | None]:
    types = {(t, c): d for t, c, d in run.con.execute(store.STORE_COLUMNS).fetchall()}
    # each table's first and last time, asked in one query per type of time column (a UNION of
    # LIMIT 1 parts: one round trip instead of 14; a union of two time types would convert one)
    parts: dict[str, tuple[list[str], list]] = {}
    labels = []     # per part, in LOG_TIME_TABLES order: (ascending?, what)
    for table, column, what in LOG_TIME_TABLES:
        dtype = str(types.get((table, column), "")).upper()
        if not dtype.startswith("TIMESTAMP"):
            continue
        where = [f'"{column}" IS NOT NULL']
        params: list = []
        if attempt is not None and (table, "attempt") in types:
            where.append("(attempt = ? OR attempt IS NULL)")
            params.append(attempt)
        if table == "collectives" and (table, "kind") in types:
            where.append(f"kind IS DISTINCT FROM '{COLL_KIND}'")
        ref = ("input_id::BIGINT AS input_id, line_no::BIGINT AS line_no"
               if (table, "input_id") in types and (table, "line_no") in types
               else "NULL::BIGINT AS input_id, NULL::BIGINT AS line_no")
        sqls, values = parts.setdefault(dtype, ([], []))
        for order in ("ASC", "DESC"):
            sqls.append(f'(SELECT {len(labels)} AS part, "{column}" AS ts, {ref} FROM "{table}" '
                        f'WHERE {" AND ".join(where)} ORDER BY "{column}" {order} LIMIT 1)')
            values += params
            labels.append((order == "ASC", what))
    found = sorted(row for sqls, values in parts.values()
                   for row in run.con.execute(" UNION ALL ".join(sqls), values).fetchall())
    firsts = [(ts, input_id, line_no, labels[part][1]) for part, ts, input_id, line_no in found if labels[part][0]]
    lasts = [(ts, input_id, line_no, labels[part][1]) for part, ts, input_id, line_no in found if not labels[part][0]]
    if not lasts:
        return None, None
    first = min(firsts, key=lambda r: r[0])
    # the latest time; of equal times, the finest reading (a launcher's 14:22:53.877 over the
    # scheduler's 14:22:53 is no tie, but two sources of one instant are)
    last = max(lasts, key=lambda r: r[0])
    return _bound(run, first), _bound(run, last)


def log_end(run, attempt: int | None = None) -> dict | None:
    """The end of the logs (``log_bounds``)."""
    return log_bounds(run, attempt)[1]


def _bound(run, row) -> dict:
    ts, input_id, line_no, what = row
    path = None
    if input_id is not None:
        found = run.con.execute("SELECT path FROM inputs WHERE input_id = ?", [input_id]).fetchall()
        path = found[0][0] if found else None
    return {"ts": ts, "path": path, "line": int(line_no) if line_no is not None else None, "what": what}
