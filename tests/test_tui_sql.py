"""The SQL screen (key 7): a query runs in a worker and fills the results table, errors show as
one line and the app keeps going, the store is never modified (read-only store and writable
in-memory-like store alike), history, the sidebar's tables and examples fill the box, and query
results are shown as inert text (markup and escape sequences literally)."""

from __future__ import annotations

import shutil

import duckdb
import pytest

from postmortem.analyzer.pipeline import Run
from postmortem.rules.report import stored_report
from tests.tui_helpers import app_of, drive, settle
from postmortem.tui.app import PostmortemApp
from postmortem.tui.screens import sql as sql_screen
from postmortem.tui.screens.sql import (QueryBox, QueryHistory, RefusedStatement, SqlScreen, read_statements,
                             run_query, status_text)
from postmortem.tui.session import Session

SAMPLE = "silent-deadlock-40r"
INJECTION = ("SELECT '[bold red]x[/] [link=http://e]y[/link]' || chr(27) || ']0;pwn' || chr(7) AS t, "
             "1 AS \"[red]col[/red]\"")
WRITES = ["DROP TABLE lines", "DELETE FROM findings", "SELECT 1; DROP TABLE lines",
          "COMMIT; DELETE FROM findings", "EXPLAIN ANALYZE DELETE FROM findings",
          "CREATE TABLE x AS SELECT 1", "UPDATE findings SET code = 'X'", "ATTACH ':memory:' AS m",
          "COPY findings TO '/tmp/should-not-exist.csv'", "SET threads = 1", "PRAGMA threads = 1"]


async def run_sql(pilot, sql: str, key: str = "ctrl+r"):
    """Type-free: load ``sql`` into the box, press the run key, wait until every row is in."""
    screen = pilot.app.screen
    screen.last_result = None
    screen.set_query(sql)
    await pilot.press(key)
    for _ in range(400):
        await pilot.pause(0.02)
        if screen.last_result is not None and not screen.filling:
            break
    await settle(pilot)   # the table measured: painted cells are not cut to their old width
    return screen.last_result


def table_rows(screen) -> list[list[str]]:
    from textual.widgets import DataTable

    table = screen.query_one("#sql-results", DataTable)
    return [[c.plain for c in table.get_row_at(i)] for i in range(table.row_count)]


def column_labels(screen) -> list[str]:
    from textual.widgets import DataTable

    return [c.label.plain for c in screen.query_one("#sql-results", DataTable).ordered_columns]


def status(screen) -> str:
    return str(screen.query_one("#sql-status").render())


@pytest.fixture
def writable_app(sample_store, tmp_path):
    """The app over a writable copy of the store, as a session ingested from paths is
    (``postmortem tui PATH`` keeps the store in memory, writable)."""
    path = tmp_path / "rw.duckdb"
    shutil.copy(sample_store(SAMPLE), path)
    con = duckdb.connect(str(path))
    session = Session(Run(con, db_path=str(path)), stored_report(con), "rw")
    return PostmortemApp(session=session, start="sql"), con


def counts(con) -> tuple[int, int]:
    return (con.execute("SELECT count(*) FROM lines").fetchone()[0],
            con.execute("SELECT count(*) FROM findings").fetchone()[0])


# -- pilot ------------------------------------------------------------------------------------

def test_opens_with_7_box_focused_tables_listed_with_row_counts(sample_store):
    app = app_of(sample_store(SAMPLE))

    async def steps(pilot):
        await pilot.press("7")
        await pilot.pause()
        screen = app.screen
        tables = {n.data[1]: n for n in screen.query_one("#sql-side").root.children[1].children}
        return type(screen), type(app.focused), tables
    screen_cls, focused, tables = drive(app, steps)
    assert screen_cls is SqlScreen and focused is QueryBox
    assert {"lines", "findings", "inputs", "ranks"} <= set(tables)
    con = duckdb.connect(str(sample_store(SAMPLE)), read_only=True)
    n_lines = con.execute("SELECT count(*) FROM lines").fetchone()[0]
    assert tables["lines"].label.plain == f"lines {n_lines:,}"
    assert [c.data[1] for c in tables["ranks"].children][:2] == ["rank", "node"]


def test_a_query_fills_the_table_with_its_rows_and_columns(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        result = await run_sql(pilot, "SELECT rank, node, NULL AS nothing FROM ranks ORDER BY rank LIMIT 3")
        return result, column_labels(app.screen), table_rows(app.screen), status(app.screen)
    result, labels, rows, line = drive(app, steps)
    assert result.error is None
    assert labels == ["rank", "node", "nothing"]
    assert [r[0] for r in rows] == ["0", "1", "2"] and all(r[1] for r in rows)
    assert [r[2] for r in rows] == ["NULL"] * 3  # NULL shown (dimmed), not an empty cell
    assert line.startswith("3 rows · 3 columns · ")


def test_a_new_query_interrupts_the_running_one(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        app.screen.set_query("SELECT sum(a.range * b.range) FROM range(100000) a, range(100000) b")
        await pilot.press("ctrl+r")
        await pilot.pause(0.3)
        return await run_sql(pilot, "SELECT 7 AS seven")
    result = drive(app, steps)
    assert result.sql == "SELECT 7 AS seven" and result.rows == [(7,)]  # the old one's result dropped


def test_errors_are_one_line_and_the_screen_keeps_working(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        seen = []
        for sql in ("SELECT * FROM no_such_table", "SELEC rank FROM ranks"):
            await run_sql(pilot, sql)
            seen.append((status(app.screen), app.screen.query_one("#sql-status").has_class("error"),
                         table_rows(app.screen)))
        await run_sql(pilot, "SELECT 42 AS answer")
        seen.append((status(app.screen), app.screen.query_one("#sql-status").has_class("error"),
                     table_rows(app.screen)))
        return seen
    missing, syntax, fine = drive(app, steps)
    assert missing[0].startswith("✗ Catalog Error: Table with name no_such_table does not exist")
    assert syntax[0].startswith("✗ Parser Error: syntax error at or near")
    for line, is_error, rows in (missing, syntax):
        assert "\n" not in line and is_error and rows == []
    assert fine[1] is False and fine[2] == [["42"]]  # quiet: no error class left behind


def test_read_only_store_refuses_writes_with_the_reason(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        await run_sql(pilot, "DROP TABLE lines")
        return status(app.screen)
    line = drive(app, steps)
    assert line.startswith("✗ the store is read-only here: DROP is not run")


def test_writable_store_is_left_intact_by_drop_and_delete(writable_app):
    app, con = writable_app
    before = counts(con)

    async def steps(pilot):
        lines = []
        for sql in ("DROP TABLE lines", "DELETE FROM findings", "SELECT 1; DROP TABLE lines"):
            await run_sql(pilot, sql)
            lines.append(status(app.screen))
        await run_sql(pilot, "SELECT count(*) AS n FROM lines")
        return lines, table_rows(app.screen)
    lines, rows = drive(app, steps)
    assert all(line.startswith("✗ the store is read-only here") for line in lines)
    assert counts(con) == before and rows == [[str(before[0])]]


def test_every_kind_of_write_is_refused_before_it_runs(writable_app):
    _, con = writable_app
    before = counts(con)
    for sql in WRITES:
        with pytest.raises(RefusedStatement):
            read_statements(sql)
        assert run_query(con.cursor(), sql).error.startswith("the store is read-only here")
    assert counts(con) == before
    for sql in ("FROM lines LIMIT 1", "WITH a AS (SELECT 1) SELECT * FROM a", "DESCRIBE lines", "SHOW TABLES",
                "SUMMARIZE findings", "EXPLAIN SELECT 1", "VALUES (1)", "SELECT 1; SELECT 2"):
        assert read_statements(sql), sql


def test_the_rollback_undoes_a_write_even_past_the_check(writable_app, monkeypatch):
    # The second guard: statements run in a transaction that is rolled back.
    _, con = writable_app
    before = counts(con)
    monkeypatch.setattr(sql_screen, "read_statements", lambda sql: [sql])
    result = run_query(con.cursor(), "DELETE FROM findings")
    assert result.error is None
    assert counts(con) == before


def test_more_rows_than_fetched_say_first_n_of_m(sample_store):
    con = duckdb.connect(str(sample_store(SAMPLE)), read_only=True)
    total = con.execute("SELECT count(*) FROM lines").fetchone()[0]
    result = run_query(con.cursor(), "SELECT line_no FROM lines;", limit=5)
    assert len(result.rows) == 5 and result.total == total
    assert status_text(result).plain.startswith(f"first 5 of {total:,} rows · 1 column · ")
    wide = run_query(con.cursor(), "SELECT * FROM lines", max_cells=210)
    assert len(wide.rows) == 210 // len(wide.columns) and wide.total == total
    quiet = run_query(con.cursor(), "SELECT line_no FROM lines LIMIT 5", limit=5)
    assert quiet.total is None and status_text(quiet).plain.startswith("5 rows · ")


def test_history_steps_back_and_forth(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")
    first, second = "SELECT 1 AS a", "SELECT 2 AS b"

    async def steps(pilot):
        box = app.screen.query_one(QueryBox)
        await run_sql(pilot, first)
        await run_sql(pilot, second)
        seen = []
        for key in ("up", "down", "ctrl+up", "up"):
            await pilot.press(key)
            seen.append(box.text)
        await pilot.press("escape")  # leave the box: ctrl+down still steps
        await pilot.press("ctrl+down")
        seen.append(box.text)
        return seen
    assert drive(app, steps) == [first, second, first, first, second]


def test_history_keeps_the_draft():
    history = QueryHistory()
    history.add("SELECT 1")
    assert history.step(-1, "SELECT 9 -- typing") == "SELECT 1"
    assert history.step(+1, "SELECT 1") == "SELECT 9 -- typing"
    assert history.step(+1, "SELECT 9 -- typing") is None


def test_sidebar_table_and_example_fill_the_box(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        screen = app.screen
        tree = screen.query_one("#sql-side")
        await pilot.press("escape", "t")
        lines_node = next(n for n in tree.root.children[1].children if n.data == ("table", "lines"))
        tree.move_cursor(lines_node)
        await pilot.press("enter")
        filled = (screen.query_one(QueryBox).text, type(app.focused))
        await pilot.press("escape", "t")
        example = tree.root.children[0].children[0]
        tree.move_cursor(example)
        await pilot.press("enter")
        result = await run_sql(pilot, screen.query_one(QueryBox).text)
        styles = {n.label.plain: str(n.label.style) for n in tree.root.children[0].children}
        return filled, example.data[1], result, styles
    filled, example_sql, result, styles = drive(app, steps)
    assert filled == ('SELECT * FROM "lines" LIMIT 100', QueryBox)
    assert result.sql == example_sql and result.error is None and result.rows
    # this sample has no timeouts (no timeout columns): that example is dimmed, findings is not
    assert styles["Timeouts"] == "dim" and styles["Findings"] == ""


def test_digits_type_into_the_box_until_escape(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        await pilot.press("1", "q")
        typed = (app.screen.query_one(QueryBox).text, app.current_mode)
        await pilot.press("escape", "1")
        await pilot.pause()
        return typed, app.current_mode
    assert drive(app, steps) == (("1q", "sql"), "verdict")


def test_enter_on_a_row_with_input_and_line_opens_the_logs(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")
    opened = []
    app.show_line = lambda path, line_no: opened.append((path, line_no))

    async def steps(pilot):
        await run_sql(pilot, "SELECT input_id, line_no, text FROM lines WHERE line_no = 3 ORDER BY input_id LIMIT 1")
        await pilot.press("escape", "enter")
        await run_sql(pilot, "SELECT 1 AS x")
        await pilot.press("escape", "enter")  # quiet: no input_id/line_no, nothing opens
        return app.session.frame("SELECT path FROM inputs ORDER BY input_id LIMIT 1")["path"][0]
    path = drive(app, steps)
    assert opened == [(path, 3)]


def test_query_results_are_shown_literally(sample_store):
    app = app_of(sample_store(SAMPLE), start="sql")

    async def steps(pilot):
        await run_sql(pilot, INJECTION)
        from textual.widgets import DataTable

        table = app.screen.query_one("#sql-results", DataTable)
        painted = "\n".join(table.render_line(y).text for y in range(3))
        return column_labels(app.screen), table.get_row_at(0), painted
    labels, row, painted = drive(app, steps)
    assert labels == ["t", "[red]col[/red]"]
    assert row[0].plain == "[bold red]x[/] [link=http://e]y[/link]\\x1b]0;pwn\\x07"
    assert not row[0].spans and "link" not in str(row[0].style)
    assert "[bold red]x[/] [link=http://e]y[/link]\\x1b]0;pwn\\x07" in painted
    assert "\x1b" not in painted and "\x07" not in painted


def test_sql_highlighting_marks_keywords_strings_and_comments():
    from postmortem.tui.screens.sql import sql_highlights

    marks = sql_highlights("SELECT 'é' AS x FROM lines -- why")
    names = [(name, start) for start, _, name in marks]
    assert names == [("keyword", 0), ("string", 7), ("keyword", 12), ("keyword", 17), ("comment", 28)]


# -- snapshots --------------------------------------------------------------------------------

async def _still(pilot):
    pilot.app.screen.query_one(QueryBox).cursor_blink = False
    await _settle(pilot)


async def _settle(pilot):
    """Let the footer catch up with the focus (it recomposes after a refresh)."""
    for _ in range(3):
        await pilot.pause(0.1)
        await pilot.wait_for_scheduled_animations()


def test_snapshot_as_opened(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(SAMPLE), start="sql"), terminal_size=(120, 40), run_before=_still)


def test_snapshot_after_a_query(snap_compare, sample_store, monkeypatch):
    monkeypatch.setattr(sql_screen, "CLOCK", lambda: 0.0)  # "< 1 ms", whatever the machine

    async def run_before(pilot):
        await _still(pilot)
        await run_sql(pilot, "SELECT rank, node, pid, local_rank, bus_id, source\nFROM ranks ORDER BY rank")
        await _settle(pilot)
    assert snap_compare(app_of(sample_store(SAMPLE), start="sql"), terminal_size=(120, 40), run_before=run_before)


def test_sidebar_labels_that_do_not_fit_end_in_an_ellipsis_keeping_the_count():
    from postmortem.tui.screens.sql import fit_label

    assert fit_label("bench_results", " 11", 0) == ("bench_results", " 11")
    assert fit_label("bench_results", " 11", 16) == ("bench_results", " 11")
    assert fit_label("bench_results", " 11", 15) == ("bench_resul…", " 11")
    assert fit_label("nccl_connections", " 1,234,567", 9) == ("nccl_con…", "")


def test_the_sidebar_cuts_with_an_ellipsis_never_silently(sample_store):
    """At 80x24 the sidebar is 24 columns: a table whose name and row count do not fit shows
    `bench_resul… 11` (the count whole), never `bench_results 1` cut at the edge; at 120x40 the
    same label is whole."""
    from tests.tui_helpers import svg_screen_lines

    for size in ((80, 24), (120, 40)):
        app = app_of(sample_store(SAMPLE), start="sql")

        async def steps(pilot):
            await pilot.pause()
            side = app.screen.query_one("#sql-side")
            tables = {n.data[1]: n for n in side.root.children[1].children}
            shot = svg_screen_lines(app.export_screenshot())
            rows = [shot[y][side.region.x:side.region.right] for y in range(side.region.y, side.region.bottom)]
            return {n: t.label.plain for n, t in tables.items()}, rows
        labels, rows = drive(app, steps, size=size)
        # the label, without the scrollbar's thumb drawn at the right
        shown = [row.split("▶ ", 1)[1].split("▕")[0].rstrip(" ▁▂▃▄▅▆▇█") for row in rows if "▶ " in row]
        assert len(shown) >= 5, rows
        cut = 0
        for text in shown:
            name = next(n for n in labels if text.startswith(n + " ") or ("…" in text and n.startswith(text.split("…")[0])))
            whole = labels[name]
            if text != whole:   # cut: the name ends in …, the count after it is whole
                head, _, count = text.partition("…")
                assert whole.startswith(head) and whole.endswith(count) and count.strip(), (size, text, whole)
                cut += 1
        assert (cut > 0) == (size == (80, 24)), (size, shown)
