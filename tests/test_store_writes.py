"""How tables reach the store and how the report reads its schema (``postmortem.analyzer.store``,
``postmortem.analyzer.pipeline.Run``): the same table whether or not the store is locked down,
the same columns whether or not the schema is frozen, and values read once per run."""
from __future__ import annotations

from datetime import datetime

import duckdb
import polars as pl
import pytest

from postmortem.analyzer import store, timeline
from postmortem.analyzer.pipeline import Run

FRAME = pl.DataFrame({
    "input_id": pl.Series([1, 2, None], dtype=pl.UInt32),
    "text": ["plain", "ünïcödé \u2502 box", None],
    "ts": [datetime(2026, 7, 24, 9, 21, 11), None, datetime(2026, 7, 24, 14, 22, 53, 877000)],
    "ranks": [[0, 1], [], None],
})


def _rows(con, table):
    return con.execute(f'SELECT * FROM "{table}" ORDER BY ALL').fetchall(), con.execute(f'DESCRIBE "{table}"').fetchall()


def test_a_table_is_the_same_in_a_locked_down_store():
    """``write_table`` names the frame to DuckDB by its variable, which a locked-down store
    refuses (no replacement scans without external access): it registers the frame there."""
    free, locked = duckdb.connect(), store.lock_down(duckdb.connect())
    for con in (free, locked):
        store.write_table(con, "events", FRAME)
        store.write_table(con, "events", FRAME.head(2))     # replaced, not appended
    assert _rows(free, "events") == _rows(locked, "events")
    assert free.execute("SELECT count(*) FROM events").fetchall() == [(2,)]


def test_frozen_columns_are_the_columns_asked_one_by_one():
    con = duckdb.connect()
    store.write_table(con, "events", FRAME)
    con.execute("CREATE VIEW lines AS SELECT input_id, text FROM events")
    run = Run(con)
    asked = {name: run.columns(name) for name in ("events", "lines", "missing")}
    with run.schema_frozen():
        assert {name: run.columns(name) for name in asked} == asked
    assert asked["events"] == ["input_id", "text", "ts", "ranks"] and asked["missing"] == []


def test_derived_values_are_read_once_and_log_bounds_hand_out_copies():
    con = duckdb.connect()
    store.write_table(con, "events", FRAME.with_columns(line_no=pl.Series([3, 4, 5], dtype=pl.UInt32)))
    store.write_table(con, "inputs", pl.DataFrame({"input_id": pl.Series([1, 2], dtype=pl.UInt32),
                                                   "path": ["a.log", "b.log"]}))
    run = Run(con)
    computed = []
    assert run.derived(("k",), lambda: computed.append(1) or "v") == run.derived(("k",), lambda: computed.append(1))
    assert computed == [1]
    first, last = timeline.log_bounds(run)
    assert (first["path"], first["line"], last["line"]) == ("a.log", 3, 5)
    first["path"] = "changed by a caller"
    assert timeline.log_bounds(run)[0]["path"] == "a.log"


def test_run_frame_reads_what_duckdbs_own_reader_reads():
    """``Run.frame`` has Polars read the result's Arrow stream (faster than DuckDB's ``.pl()``):
    the same frame, types and values, for a table of every kind of column the store holds and
    for computed results; an interval, which Polars cannot read, raises an ordinary error
    (DuckDB's), never Polars' panic, so a rule that asks for one fails alone."""
    con = duckdb.connect()
    store.write_table(con, "events", FRAME.with_columns(
        ok=pl.Series([True, None, False]), score=pl.Series([1.5, None, 2.0]),
        names=pl.Series([["a"], None, []], dtype=pl.List(pl.String)),
        when=pl.Series([None, None, None], dtype=pl.Datetime("ns"))))
    run = Run(con)
    for sql in ['SELECT * FROM "events"', 'SELECT * FROM "events" WHERE input_id = ?',
                "SELECT count(*) AS n, sum(input_id) AS s, avg(score) AS m, max(ts) AS t FROM events",
                "SELECT input_id, list(text) AS texts FROM events GROUP BY ALL ORDER BY ALL",
                "SELECT {'a': input_id, 'b': text} AS pair FROM events"]:
        params = [2] if "?" in sql else None
        got, expected = run.frame(sql, params), con.sql(sql, params=params).pl()
        assert got.schema == expected.schema and got.equals(expected), sql
    with pytest.raises(Exception, match="(?i)interval"):   # a panic is no Exception: it would escape
        run.frame("SELECT max(ts) - min(ts) AS span FROM events")
