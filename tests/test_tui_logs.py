"""The Logs screen: merged lines paged from the store, filters (rank, node, level, regex) whose
counts match SQL, search with next/previous, go-to-line, a finding's evidence opened from
another screen, and crafted log text shown literally."""

from __future__ import annotations

import re

import duckdb
import pytest

from postmortem.analyzer.store import line_text
from tests.tui_helpers import app_of, drive
from postmortem.views.log_data import ERROR, WARN, Filters, LogData, parse_ranks
from postmortem.tui.screens.logs import LogsScreen, LogView

DEADLOCK = "silent-deadlock-40r"


async def idle(pilot, after: int = -1):
    """Wait until the Logs screen's worker has applied the last request (one newer than request
    number ``after``: a key's message may still be on its way when ``press`` returns)."""
    for _ in range(400):
        await pilot.pause(0.02)
        s = pilot.app.screen
        if isinstance(s, LogsScreen) and s._seq > after and not s._busy and s.data is not None and s.data.built:
            await pilot.pause()
            view = s.view
            top = round(view.scroll_y)
            if s.data.state.count == 0 or top <= view.cursor < top + view.scrollable_content_region.height:
                return s  # the cursor is scrolled into view after a refresh
    raise AssertionError("the Logs screen stayed busy")


async def type_in(pilot, key: str, text: str):
    """Open a prompt with ``key``, fill it in (typing 60 characters one by one is slow on a
    loaded machine; the first letter is typed) and press Enter."""
    from textual.widgets import Input

    await pilot.press(key)
    await pilot.pause()
    box = pilot.app.screen.query_one("#logs-prompt-input", Input)
    assert box.has_focus
    if text[:1].isalnum():
        await pilot.press(text[0])
    box.value = text
    before = pilot.app.screen._seq
    await pilot.press("enter")
    return await idle(pilot, before)


async def press_and_wait(pilot, key: str):
    before = pilot.app.screen._seq
    await pilot.press(key)
    return await idle(pilot, before)


def visible_rows(screen: LogsScreen):
    view = screen.view
    top = round(view.scroll_y)
    return [screen.data.row(p) for p in range(top, min(top + view.scrollable_content_region.height,
                                                       screen.data.state.count))]


def rendered(view: LogView, pos: int) -> str:
    strip = view.render_line(pos - round(view.scroll_y))
    return "".join(seg.text for seg in strip)


@pytest.fixture(scope="module")
def con(sample_store):
    connection = duckdb.connect(str(sample_store(DEADLOCK)), read_only=True)
    yield connection
    connection.close()


def count(con, where: str, params=()) -> int:
    return con.execute(f"SELECT count(*) FROM lines WHERE {where}", list(params)).fetchone()[0]


def test_data_filters_count_what_sql_counts(con):
    data = LogData(con.cursor())
    data.build()
    assert data.state.count == count(con, "true")
    assert data.apply(Filters(ranks=parse_ranks("0-7,12"))).count == count(con, "rank BETWEEN 0 AND 7 OR rank = 12")
    assert data.apply(Filters(nodes=("h20-node-02",))).count == count(con, "node = 'h20-node-02'")
    assert data.apply(Filters(nodes=("h20-node-0[12]",), ranks=((0, 11),))).count == \
        count(con, "node IN ('h20-node-01', 'h20-node-02') AND rank <= 11")
    errors = data.apply(Filters(min_level=ERROR))
    traceback_heads = count(con, "text LIKE 'Traceback (most recent call last)%'")
    assert 0 < traceback_heads <= errors.count < count(con, "true") / 100
    assert data.apply(Filters(min_level=WARN)).count >= errors.count
    # NCCL INFO lines have no text in the store: the regex reads them back from their files.
    assert count(con, "text LIKE '%cudaDriverVersion%'") == 0
    on_disk = sum(1 for input_id, path in con.execute(
        "SELECT DISTINCT l.input_id, abs_path FROM lines l JOIN inputs USING (input_id) WHERE l.text IS NULL").fetchall()
        for line in open(path, encoding="utf-8", errors="replace") if "cudaDriverVersion" in line)
    assert data.apply(Filters(regex="cudadriverversion")).count == on_disk > 0  # smart case
    assert all("cudaDriverVersion" in data.row(p).text for p in range(data.state.count))
    both = data.apply(Filters(regex="ProcessGroupNCCL|cudaDriverVersion", ranks=((3, 3),)))
    assert both.count == count(con, "rank = 3 AND regexp_matches(text, 'ProcessGroupNCCL')") + 1


def test_data_orders_by_time_keeping_each_file_in_order(con):
    data = LogData(con.cursor())
    data.build()
    swapped = data.cur.execute("""SELECT count(*) FROM (SELECT line_no, lag(line_no) OVER
        (PARTITION BY input_id ORDER BY vpos) AS before FROM pm_view) WHERE line_no <= before""").fetchone()[0]
    assert swapped == 0  # a file's lines never swap places
    times = [data.row(p).path for p in (0, data.state.count - 1)]
    # no time: first (the sample's README.md is not evidence since issue 24, so a config file)
    assert times[0] == "config/collect_env.txt"
    by_file = data.apply(Filters(), "file")
    first = data.row(0)
    assert by_file.order == "file" and (first.path, first.line_no) == \
        con.execute("SELECT min(path), 1 FROM inputs").fetchone()


def test_a_coll_traced_run_shows_every_line_of_its_files_in_order(tmp_path):
    """In a COLL-traced run ``lines`` is a view over its own rows and the bulk rows
    (postmortem.analyzer.bulk): the screen still shows each file whole, in its order, each
    line's text read back where the store keeps none, and a regex finds the COLL lines."""
    from postmortem.analyzer.pipeline import analyze
    from postmortem.generator import RunSpec, generate_run

    out = tmp_path / "run"
    generate_run(out, RunSpec(nodes=1, gpus_per_node=4, culprit=2, iterations_before_hang=3,
                              nccl_subsys="INIT,ENV,COLL", coll_trace=True))
    run = analyze([out], db_path=tmp_path / "store.duckdb", use_cache=False)
    assert run.con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'lines'").fetchone()[0]
    data = LogData(run.con.cursor())
    data.build()
    shown = [data.row(p) for p in range(data.apply(Filters(), "file").count)]
    paths = dict(run.con.execute("SELECT path, abs_path FROM inputs").fetchall())
    for path in sorted({r.path for r in shown}):
        text = open(paths[path], encoding="utf-8").read().splitlines()
        mine = [r for r in shown if r.path == path]
        assert [r.line_no for r in mine] == list(range(1, len(text) + 1)), path
        assert all(text[r.line_no - 1].endswith(r.text) for r in mine), path
    traced = sum(" opCount " in r.text for r in shown)
    assert traced > 500
    assert data.apply(Filters(regex=" opCount ")).count == traced


def test_rows_read_while_a_worker_applies_filters(con):
    """The UI thread pages rows without the lock while the worker re-applies filters: a page
    cache cleared between its lookup and its read was a KeyError in CI. Here the worker's
    apply() runs at exactly that moment, from inside the cache's lookup."""
    from collections import OrderedDict

    data = LogData(con.cursor())
    data.build()
    first = data.row(0)

    class ApplyOnLookup(OrderedDict):
        def _apply_once(self):
            if not getattr(self, "applied", False):
                self.applied = True
                data.apply(Filters())

        def __contains__(self, key):
            found = super().__contains__(key)
            self._apply_once()
            return found

        def get(self, key, default=None):
            found = super().get(key, default)
            self._apply_once()
            return found

    data._pages = ApplyOnLookup(data._pages)
    assert data.row(0) == first  # the page it looked up, whole
    assert data.row(0) == first  # and then from the new view's cache


def test_open_scroll_filter_and_clear(sample_store, con):
    app = app_of(sample_store(DEADLOCK))

    async def steps(pilot):
        await pilot.press("6")
        s = await idle(pilot)
        view, total = s.view, s.data.state.count
        out = {"opened_at": view.cursor, "total": total, "focused": app.focused is view}
        await pilot.press("pageup", "up", "up")
        out["after_keys"] = view.cursor
        out["cursor_visible"] = round(view.scroll_y) <= view.cursor < round(view.scroll_y) + view.size.height
        await pilot.press("home")
        out["home"] = (view.cursor, view.scroll_y)
        s = await type_in(pilot, "r", "0-7,12")
        out["ranks"] = (s.data.state.count, {r.rank for r in visible_rows(s)})
        s = await type_in(pilot, "h", "h20-node-01")
        out["ranks_nodes"] = s.data.state.count
        status = str(s.query_one("#logs-status").render())
        out["status"] = status
        s = await press_and_wait(pilot, "c")
        for _ in range(3):  # all -> INFO -> WARN -> ERROR
            s = await press_and_wait(pilot, "l")
        out["errors"] = (s.data.state.count, {r.level for r in visible_rows(s)})
        await press_and_wait(pilot, "c")
        s = await type_in(pilot, "f", "watchdog")
        out["regex"] = (s.data.state.count, all(re.search("(?i)watchdog", r.text) for r in visible_rows(s)))
        s = await press_and_wait(pilot, "c")
        out["cleared"] = s.data.state.count
        return out
    out = drive(app, steps)
    assert out["focused"] and out["total"] == count(con, "true")
    assert out["opened_at"] == out["total"] - 1  # opens at the end, where the run stopped
    assert out["after_keys"] < out["opened_at"] - 2 and out["cursor_visible"]
    assert out["home"] == (0, 0)
    ranks = count(con, "rank BETWEEN 0 AND 7 OR rank = 12")
    assert out["ranks"][0] == ranks and out["ranks"][1] <= set(range(8)) | {12}
    assert out["ranks_nodes"] == count(con, "(rank BETWEEN 0 AND 7 OR rank = 12) AND node = 'h20-node-01'")
    assert f"{out['ranks_nodes']:,} of {out['total']:,} lines" in out["status"] and "rank 0-7,12" in out["status"]
    assert out["errors"][0] > 0 and out["errors"][1] == {ERROR}
    watchdog = count(con, "regexp_matches(text, '(?i)watchdog')")
    assert out["regex"] == (watchdog, True)  # no NCCL INFO line says watchdog
    assert out["cleared"] == out["total"]


def test_search_next_previous_and_highlight(sample_store, con):
    app = app_of(sample_store(DEADLOCK), start="logs")

    async def steps(pilot):
        s = await idle(pilot)
        await pilot.press("home")
        s = await type_in(pilot, "slash", "Traceback")
        view, hits = s.view, []
        hits.append(view.cursor)
        for key in ("n", "n", "N"):
            await pilot.press(key)
            await pilot.pause()
            hits.append(view.cursor)
        row = s.data.row(view.cursor)
        match = s.view.get_component_rich_style("logview--match")
        body = view._body(row)
        highlighted = [body.plain[span.start:span.end] for span in body.spans if span.style == match]
        quiet = view._body(s.data.row(view.cursor + 1))  # the frame line after it: no match
        return {"hits": hits, "count": s.data.state.hits, "text": row.text, "highlighted": highlighted,
                "quiet": [sp for sp in quiet.spans if sp.style == match],
                "status": str(s.query_one("#logs-status").render())}
    out = drive(app, steps)
    assert out["count"] == count(con, "text LIKE '%Traceback%'") > 2
    first, second, third, back = out["hits"]
    assert first < second < third and back == second
    assert "Traceback" in out["text"] and out["highlighted"] == ["Traceback"]
    assert out["quiet"] == []
    assert f"search /Traceback/ {out['count']} matches" in out["status"]


def test_go_to_line_by_path_and_by_number(sample_store):
    app = app_of(sample_store(DEADLOCK), start="logs")
    path = "logs/h20-node-03/4242_tnfzdf19/attempt_0/1/stderr.log"

    async def steps(pilot):
        s = await idle(pilot)
        s = await type_in(pilot, "colon", f"{path}:12")
        a = s.data.row(s.view.cursor)
        s = await type_in(pilot, "colon", "700")
        b = s.data.row(s.view.cursor)
        s = await type_in(pilot, "colon", "attempt_0/1/stderr.log:5")  # a tail that names no one file
        c = s.data.row(s.view.cursor)
        return (a.path, a.line_no), (b.path, b.line_no), (c.path, c.line_no)
    a, b, c = drive(app, steps)
    assert a == (path, 12) and b == (path, 700)
    assert c == b  # ambiguous: stays where it was (and says so)


def test_evidence_of_a_finding_opens_selected_and_visible(sample_store):
    app = app_of(sample_store(DEADLOCK))
    finding = next(f for f in app.session.report["findings"] if f["severity"] == "error" and f.get("evidence"))
    evidence = finding["evidence"][0]

    async def steps(pilot):
        # A filter that hides the evidence line is cleared by goto.
        await pilot.press("6")
        s = await idle(pilot)
        await type_in(pilot, "r", "39")
        await pilot.press("1")
        await pilot.pause()
        app.show_line(evidence["path"], evidence["line"])
        s = await idle(pilot)
        view = s.view
        row = s.data.row(view.cursor)
        top = round(view.scroll_y)
        return (row.path, row.line_no, top <= view.cursor < top + view.scrollable_content_region.height,
                s.data.state.filters.active, rendered(view, view.cursor))
    path, line, visible, filtered, shown = drive(app, steps)
    assert (path, line) == (evidence["path"], evidence["line"]) and visible and not filtered
    assert f" {line} " in shown


def test_goto_before_the_screen_is_mounted(sample_store):
    app = app_of(sample_store(DEADLOCK))

    async def steps(pilot):
        app.show_line("pyspy/h20-node-03/py-spy-413928.txt", 5)  # the Logs screen is created here
        s = await idle(pilot)
        row = s.data.row(s.view.cursor)
        return row.path, row.line_no
    assert drive(app, steps) == ("pyspy/h20-node-03/py-spy-413928.txt", 5)


CRAFTED = "step 1%\rstep 100%\t[bold red]x[/] [link=http://e]y[/link] \x1b]0;pwn\x07 end"


def test_crafted_line_is_shown_literally(tmp_path):
    from postmortem.analyzer.pipeline import analyze
    from postmortem.rules.report import build_report

    job = tmp_path / "job"
    job.mkdir()
    (job / "rank0.log").write_text("hello\n" + CRAFTED + "\nbye\n", encoding="utf-8")
    store = tmp_path / "crafted.duckdb"
    run = analyze([job], db_path=store)
    build_report(run)
    run.con.close()
    app = app_of(store, start="logs")

    async def steps(pilot):
        app.show_line("rank0.log", 2)
        s = await idle(pilot)
        return rendered(s.view, s.view.cursor), s.data.row(s.view.cursor)
    shown, row = drive(app, steps)
    assert row.line_no == 2
    assert "[bold red]x[/] [link=http://e]y[/link] \\x1b]0;pwn\\x07 end" in shown
    assert "step 100%" in shown and not any(ch in shown for ch in "\x1b\x07\t\r")
    assert re.search(r"step 100% +\[bold", shown)  # the tab became spaces
    # the raw bytes are still in the file (the store keeps the last \r segment, as parsers do)
    abs_path = str(job / "rank0.log")
    assert line_text(abs_path, 6, len(CRAFTED.encode())) == CRAFTED


async def _still(pilot):
    """The footer recomposes after focus moves (prompt closed): let it settle."""
    await idle(pilot)
    for _ in range(5):
        await pilot.wait_for_scheduled_animations()
        await pilot.pause(0.05)


async def _settle(pilot):
    await _still(pilot)


async def _regex_filtered(pilot):
    await idle(pilot)
    await type_in(pilot, "f", "watchdog|NCCL WARN")
    await pilot.press("home")
    await _still(pilot)


def test_snapshot_deadlock_as_opened(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK), start="logs"), terminal_size=(120, 40), run_before=_settle)


def test_snapshot_filtered_by_a_regex(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK), start="logs"), terminal_size=(120, 40),
                        run_before=_regex_filtered)


def test_enter_on_a_finding_in_the_verdict_opens_its_evidence_line_here(sample_store):
    """The whole jump, no stand-in: the verdict screen's Enter on the culprit finding opens the
    Logs screen with that finding's first evidence line selected and on screen."""
    app = app_of(sample_store(DEADLOCK))
    finding = app.session.report["findings"][0]
    evidence = finding["evidence"][0]

    async def steps(pilot):
        await pilot.pause()
        await pilot.press("enter")
        s = await idle(pilot)
        return type(s).__name__, s.data.row(s.view.cursor), rendered(s.view, s.view.cursor)
    screen, row, shown = drive(app, steps)
    assert finding["code"] == "H001" and screen == "LogsScreen"
    assert (row.path, row.line_no) == (evidence["path"], evidence["line"])
    assert f" {evidence['line']} " in shown


def test_goto_a_time_a_rank_and_a_node(sample_store):
    """`:` takes a time (the first line at or after it, in time order), `rank N` and `node NAME`;
    the kernel log's Xid (a dmesg line: no clock of its own, only the node model's time) sorts at
    its time, not among the untimed files."""
    from textual.widgets import Input

    app = app_of(sample_store("gpu-fell-off-bus"), start="logs")

    async def jump(pilot, text):
        await pilot.press("colon")
        await pilot.pause()
        box = pilot.app.screen.query_one("#logs-prompt-input", Input)
        box.value = text
        await pilot.press("enter")
        await pilot.pause()
        s = pilot.app.screen
        return s.data.row(s.view.cursor)

    async def steps(pilot):
        s = await idle(pilot)
        at = await jump(pilot, "09:22:50")
        after = [s.data.row(p) for p in range(s.view.cursor, s.view.cursor + 400)]
        rank = await jump(pilot, "rank 21")
        node = await jump(pilot, "node h20-node-02")
        return at, after, rank, node

    at, after, rank, node = drive(app, steps)
    assert at is not None and not at.path.startswith("README")
    xid = next(r for r in after if r is not None and "Xid" in r.text)
    assert "node_logs" in xid.path or "kern" in xid.path or "dmesg" in xid.path
    assert rank.rank == 21
    assert node.node == "h20-node-02"


def test_h_goes_to_the_hangs_start_and_f_to_the_first_failure_line(sample_store):
    """gpu-fell-off-bus: `F` selects rank 21's watchdog timeout (its own line, as evidence is
    opened), `H` the first line at the last step before the stall (09:21:14); the deadlock has no
    rank error, and `F` says so instead of doing nothing."""
    app = app_of(sample_store("gpu-fell-off-bus"), start="logs")
    said: list[str] = []
    app.notify = lambda message, **_: said.append(str(message))  # type: ignore[method-assign]

    async def wait_for_note(pilot, n):
        for _ in range(400):
            await pilot.pause(0.02)
            if len(said) >= n:
                return await idle(pilot)
        raise AssertionError(f"no notification after {said}")

    async def steps(pilot):
        s = await idle(pilot)
        await pilot.press("F")
        s = await wait_for_note(pilot, 1)
        failure = s.data.row(s.view.cursor)
        await pilot.press("H")
        s = await wait_for_note(pilot, 2)
        return failure, s.data.row(s.view.cursor)
    failure, hang = drive(app, steps)
    assert (failure.path, failure.line_no, failure.rank) == ("logs/h20-node-03/4242_g1w_2vy6/attempt_0/5/stderr.log", 1, 21)
    assert "Watchdog caught collective operation timeout" in failure.text
    assert "09:21:14" in hang.text
    assert said == ["First failure 09:32:57: a timeout of rank 21",
                    "Hang's start 09:21:14: the last step, then no progress"]

    app = app_of(sample_store(DEADLOCK), start="logs")
    said.clear()
    app.notify = lambda message, **_: said.append(str(message))  # type: ignore[method-assign]

    async def no_failure(pilot):
        s = await idle(pilot)
        before = s.view.cursor
        await pilot.press("F")
        await wait_for_note(pilot, 1)
        return before, s.view.cursor
    before, after = drive(app, no_failure)
    assert before == after and said == ["No failure in this run: no rank logged a timeout or an error"]


def test_while_a_search_runs_the_status_says_searching_not_a_count(sample_store, con, monkeypatch):
    """The status bar once read "0 matches · working…" while the search ran; now it says
    "searching…" until the worker is done, then the count."""
    import threading

    from textual.widgets import Input

    release = threading.Event()
    search = LogData.search

    def slow_search(self, pattern):
        if pattern:
            release.wait(10)
        return search(self, pattern)
    monkeypatch.setattr(LogData, "search", slow_search)
    app = app_of(sample_store(DEADLOCK), start="logs")

    def status(s) -> str:
        return str(s.query_one("#logs-status").render())

    async def steps(pilot):
        s = await idle(pilot)
        await pilot.press("slash")
        await pilot.pause()
        s.query_one("#logs-prompt-input", Input).value = "Traceback"
        before = s._seq
        await pilot.press("enter")
        await pilot.pause(0.2)
        running = status(s)
        release.set()
        s = await idle(pilot, before)
        return running, status(s), s.data.state.hits
    running, done, hits = drive(app, steps)
    assert "search /Traceback/ searching…" in running
    assert "match" not in running and "working" not in running
    assert hits == count(con, "text LIKE '%Traceback%'") > 2
    assert f"search /Traceback/ {hits} matches" in done and "searching" not in done
