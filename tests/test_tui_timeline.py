"""The Timeline screen: lanes and marks read from the store (postmortem.views.timeline_data), the culprit
pinned and highlighted on open (one key from the verdict), zoom/pan/jump/collapse changing what
is drawn, a healthy run with nothing highlighted, log text shown literally, and snapshots."""

from __future__ import annotations

import duckdb

from tests.tui_helpers import app_of, drive
from postmortem.views import timeline_data as td

DEADLOCK = "silent-deadlock-40r"


def _data(store) -> td.TimelineData:
    from postmortem.tui.session import open_store

    session = open_store(store)
    try:
        return td.load(session.run.con, session.culprit_ranks, session.culprit_nodes)
    finally:
        session.run.con.close()


async def _wait_loaded(pilot):
    for _ in range(400):
        screen = pilot.app.screen
        if getattr(screen, "loaded", False):
            await pilot.pause()
            return screen
        await pilot.pause(0.02)
    raise AssertionError("the timeline never finished loading")


def _culprit_row_style(lanes):
    return lanes._style("culprit-row")


def test_lanes_marks_and_culprit_of_the_deadlock_sample(sample_store):
    data = _data(sample_store(DEADLOCK))
    assert len(data.rank_lanes) == 40 and data.nodes == [f"h20-node-0{i}" for i in range(1, 6)]
    assert data.ranks_of["h20-node-03"] == list(range(16, 24))
    assert data.culprit_ranks == [17] and data.culprit_nodes == ["h20-node-03"]
    kinds = {m.kind for lane in data.all_lanes() for m in lane.marks}
    assert {"init", "collective", "iteration", "last"} <= kinds
    assert "timeout" not in kinds          # the silent deadlock: no watchdog fired
    # every rank has exactly one last line, and the culprit's last progress says nothing is in flight
    assert all(len(lane.by_kind.get("last", [])) == 1 for lane in data.rank_lanes.values())
    culprit = data.rank_lanes[17]
    progress = [m for m in culprit.marks if m.kind == "collective" and m.text.startswith("default_pg")]
    assert "#7218" in progress[-1].text and "nothing in flight" in progress[-1].text
    waiting = [m for m in data.rank_lanes[16].marks if m.kind == "collective" and m.text.startswith("default_pg")]
    assert "waiting in #7219" in waiting[-1].text
    # the culprit is pinned at the top, and highlighted in its node too
    rows = data.rows()
    top = [r for r in rows[:4] if r.kind == "rank"]
    assert top and top[0].rank == 17 and top[0].culprit
    assert [r.rank for r in rows if r.culprit and r.kind == "rank"] == [17, 17]
    assert sum(r.culprit for r in rows if r.kind == "rank" and r.rank != 17) == 0
    # collapsed: one lane per node, merging its ranks' marks
    shut = data.rows(set(data.nodes))
    assert [r.label for r in shut if r.kind == "node"] == [f"▸ h20-node-0{i} ·8" for i in range(1, 6)]
    assert len(data.merged("h20-node-03").marks) == sum(len(data.rank_lanes[r].marks) for r in range(16, 24))


def test_the_waiting_ranks_draw_work_in_flight_and_the_culprit_does_not(sample_store):
    """Moment one at a glance: from the c10d progress lines, 39 ranks have a collective enqueued
    and not completed until their last line; rank 17 has nothing in flight after #7218."""
    data = _data(sample_store(DEADLOCK))

    def waiting_at_the_end(lane):
        return bool(lane.busy) and lane.busy[-1][1] >= lane.last_of("last") - 1.0
    waiting = [r for r, lane in data.rank_lanes.items() if waiting_at_the_end(lane)]
    assert sorted(waiting) == [r for r in range(40) if r != 17]
    width, dt = 50, (data.end - data.start) / 50
    last_columns = lambda lane: lane.cells(data.start, dt, width)[-10:]  # noqa: E731 -- the hang
    assert "inflight" in last_columns(data.rank_lanes[16])
    assert "inflight" not in last_columns(data.rank_lanes[17])
    merged = data.merged("h20-node-03")          # a collapsed node shows its waiting ranks' band
    assert "inflight" in merged.cells(data.start, dt, width)


def test_a_healthy_run_has_no_work_left_in_flight_at_the_end(sample_store):
    data = _data(sample_store("healthy-40r"))
    for lane in data.rank_lanes.values():
        assert not lane.busy or lane.busy[-1][1] < lane.last_of("last")


def test_cells_match_a_plain_scan_of_the_marks(sample_store):
    lane = _data(sample_store(DEADLOCK)).rank_lanes[39]
    lane.busy = []  # marks only: the work-in-flight band has its own test
    t0, width = lane.times[0] - 1, 97
    dt = (lane.times[-1] - t0) / 60
    want: list = [None] * width
    for m in lane.marks:
        col = int((m.t - t0) / dt)
        if 0 <= col < width and (want[col] is None or td.KINDS.index(m.kind) < td.KINDS.index(want[col])):
            want[col] = m.kind
    assert lane.cells(t0, dt, width) == want


def test_two_from_the_verdict_shows_the_culprit_lane_highlighted(sample_store):
    app = app_of(sample_store(DEADLOCK))

    async def steps(pilot):
        assert app.current_mode == "verdict"
        await pilot.press("2")                     # the one key press
        screen = await _wait_loaded(pilot)
        lanes = screen.lanes
        text = lanes.visible_text()
        culprit_style = _culprit_row_style(lanes)
        highlighted = [y for y in range(len(text)) if "rank 17" in text[y]
                       and any(seg.style and seg.style.bgcolor == culprit_style.bgcolor
                               for seg in lanes.render_line(y))]
        row = lanes.rows[lanes.selected]
        return text, highlighted, row, lanes.cursor_t, lanes.data.rank_lanes[17].last_of("last")
    text, highlighted, row, cursor_t, last = drive(app, steps)
    assert any(line.startswith("★ rank 17") for line in text)
    assert highlighted, text
    assert row.rank == 17 and row.culprit
    assert cursor_t == last                         # the cursor sits on the culprit's last line


def test_zoom_pan_jump_and_collapse_change_what_is_drawn(sample_store):
    app = app_of(sample_store(DEADLOCK), start="timeline")

    async def steps(pilot):
        screen = await _wait_loaded(pilot)
        lanes = screen.lanes
        seen = {"open": (lanes.view, lanes.visible_text())}
        await pilot.press("plus", "plus")
        seen["zoom"] = (lanes.view, lanes.visible_text())
        await pilot.press("left_square_bracket")
        seen["pan"] = (lanes.view, lanes.visible_text())
        before = lanes.cursor_t
        await pilot.press("p")
        seen["prev"] = (before, lanes.cursor_t, str(screen.panel_text()))
        await pilot.press("n")
        seen["next"] = lanes.cursor_t
        await pilot.press("left")
        seen["left"] = lanes.cursor_column
        await pilot.press("c")
        seen["collapsed"] = lanes.visible_text()
        await pilot.press("down", "down", "down")
        node = lanes.rows[lanes.selected]
        await pilot.press("enter")
        seen["one"] = (node.node, lanes.visible_text())
        await pilot.press("0", "minus")
        seen["fit"] = lanes.fit_mode
        await pilot.press("0")
        seen["fit2"] = lanes.fit_mode
        return seen
    seen = drive(app, steps)
    (t0, dt), text0 = seen["open"]
    (z0, zdt), ztext = seen["zoom"]
    assert abs(zdt - dt / 4) < 1e-9 and ztext != text0
    (p0, pdt), ptext = seen["pan"]
    assert p0 < z0 and pdt == zdt and ptext != ztext
    before, after, panel = seen["prev"]
    assert after < before and "rank 17" in panel and "#7218" in panel
    assert seen["next"] > after
    collapsed = seen["collapsed"]
    assert sum(line.startswith("▸ h20-node-") for line in collapsed) == 5
    assert not any(line.startswith("  rank 3 ") for line in collapsed)
    node, one = seen["one"]
    assert node and any(line.startswith(f"▾ {node}") for line in one)
    assert sum(line.startswith("▸ h20-node-") for line in one) == 4
    assert seen["fit"] is False and seen["fit2"] is True


def test_a_healthy_run_has_no_culprit_lane_and_no_timeouts(sample_store):
    store = sample_store("healthy-40r")
    data = _data(store)
    assert not data.culprit_ranks and not any(r.culprit for r in data.rows())
    assert not any(lane.by_kind.get("timeout") for lane in data.all_lanes())
    app = app_of(store, start="timeline")

    async def steps(pilot):
        screen = await _wait_loaded(pilot)
        lanes = screen.lanes
        bg = _culprit_row_style(lanes).bgcolor
        styled = [y for y in range(len(lanes.visible_text()))
                  if any(seg.style and seg.style.bgcolor == bg for seg in lanes.render_line(y))]
        return lanes.visible_text(), styled
    text, styled = drive(app, steps)
    assert not styled and not any("★" in line or line.startswith("culprit") for line in text)
    assert not any(td.GLYPH["timeout"] in line for line in text)


CRAFTED = "[bold red]x[/] [link=http://e]y[/link] \x1b]0;pwn\x07"


def test_log_text_under_the_cursor_is_shown_literally(sample_store):
    app = app_of(sample_store(DEADLOCK), start="timeline")

    async def steps(pilot):
        screen = await _wait_loaded(pilot)
        data = screen.lanes.data
        lane = data.rank_lanes[17]
        lane.marks.append(td.Mark(data.end, "error", CRAFTED, 17, "h20-node-03", None, None))
        lane.finish()
        data._merged.clear()
        screen.lanes.set_data(data)
        screen.lanes.goto_time(data.end)
        screen._refresh_aux()
        await pilot.pause()
        panel = screen.query_one("#tl-panel")
        return str(panel.content), panel.content.spans if hasattr(panel.content, "spans") else []
    shown, spans = drive(app, steps)
    assert "[bold red]x[/] [link=http://e]y[/link]" in shown
    assert "\x1b" not in shown and "\\x1b" in shown and "\x07" not in shown
    assert not any("link" in str(s.style) for s in spans)


def _notes(app) -> list[str]:
    """Record what the app notifies (run_test turns the toasts off)."""
    said: list[str] = []
    app.notify = lambda message, **_: said.append(str(message))  # type: ignore[method-assign]
    return said


def test_h_goes_to_the_hangs_start_and_f_to_the_first_failure(sample_store):
    """gpu-fell-off-bus: the last step 09:21:14, then rank 21's watchdog timeout at 09:32:57 (the
    moments the HTML report's picture centres on, postmortem.views.timeline.moments)."""
    app = app_of(sample_store("gpu-fell-off-bus"), start="timeline")
    said = _notes(app)

    async def steps(pilot):
        screen = await _wait_loaded(pilot)
        lanes = screen.lanes
        await pilot.press("H")
        hang = td.clock_text(lanes.data, lanes.cursor_t, True)
        await pilot.press("F")
        row = lanes.rows[lanes.selected]
        marks = [(m.kind, m.rank, m.line_no) for _, m in lanes.marks_under_cursor(False)]
        return hang, (row.kind, row.rank), marks, str(screen.panel_text())
    hang, row, marks, panel = drive(app, steps)
    assert hang.startswith("09:21:14")
    assert row == ("rank", 21) and ("timeout", 21, 1) in marks
    assert "stderr.log:1" in panel
    assert said == ["Hang's start 09:21:14: the last step, then no progress",
                    "First failure 09:32:57: a timeout of rank 21"]


def test_without_a_failure_or_a_hang_f_and_h_say_so(sample_store):
    """The deadlock has a hang (collectives last completed 09:23:53) but no rank logged an error;
    the healthy run has neither. Nothing moves where there is nothing to go to."""
    results = {}
    for sample in (DEADLOCK, "healthy-40r"):
        app = app_of(sample_store(sample), start="timeline")
        said = _notes(app)

        async def steps(pilot):
            screen = await _wait_loaded(pilot)
            lanes = screen.lanes
            before = lanes.cursor_t
            await pilot.press("F")
            after_f = lanes.cursor_t
            await pilot.press("H")
            return before, after_f, td.clock_text(lanes.data, lanes.cursor_t, True)
        results[sample] = drive(app, steps), said
    (before, after_f, hang), said = results[DEADLOCK]
    assert after_f == before and hang.startswith("09:23:53")
    assert said == ["No failure in this run: no rank logged a timeout or an error",
                    "Hang's start 09:23:53: collectives last completed, then no progress"]
    (before, after_f, _), said = results["healthy-40r"]
    assert said == ["No failure in this run: no rank logged a timeout or an error",
                    "No hang in this run: progress did not stop before the first failure or the end of the logs"]


def _wait_before_snapshot(presses=()):
    async def run_before(pilot):
        await _wait_loaded(pilot)
        for key in presses:
            await pilot.press(key)
        await pilot.pause()
    return run_before


def test_snapshot_deadlock_as_opened(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK), start="timeline"), terminal_size=(120, 40),
                        run_before=_wait_before_snapshot())


def test_snapshot_deadlock_collapsed(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK), start="timeline"), terminal_size=(120, 40),
                        run_before=_wait_before_snapshot(["c"]))


def test_no_table_without_a_time_is_guessed(tmp_path):
    """A tiny store: rows without ts are skipped; a kernel event far outside the run is left out."""
    db = tmp_path / "tiny.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE ranks (rank BIGINT, node VARCHAR, cuda_dev BIGINT)")
    con.execute("INSERT INTO ranks VALUES (0, 'a', 0), (1, 'b', 0)")
    con.execute("CREATE TABLE events (rank BIGINT, node VARCHAR, ts TIMESTAMP, kind VARCHAR, level VARCHAR, "
                "message VARCHAR, input_id BIGINT, line_no BIGINT)")
    con.execute("INSERT INTO events VALUES (0, 'a', '2026-01-01 10:00:00', 'pg_options', 'I', 'init', 1, 1), "
                "(0, 'a', NULL, 'exception', NULL, 'no time', 1, 2), "
                "(1, 'b', '2026-01-01 10:05:00', 'watchdog_timeout', 'E', 'timed out', 2, 1)")
    con.execute("CREATE TABLE node_events (node VARCHAR, ts TIMESTAMP, kind VARCHAR, code VARCHAR, message VARCHAR)")
    con.execute("INSERT INTO node_events VALUES ('b', '2026-01-01 10:04:00', 'xid', '79', 'fell off'), "
                "('b', '2025-12-01 10:00:00', 'xid', '48', 'long before')")
    data = td.load(con, [1], ["b"])
    assert {(m.kind, m.text) for m in data.rank_lanes[0].marks} == {("init", "pg_options: init"),
                                                                    ("last", "its last timestamped line: (text not stored)")}
    assert {m.kind for m in data.rank_lanes[1].marks} == {"timeout", "last"}
    assert [m.text for m in data.node_lanes["b"].marks] == ["Xid 79: fell off"]
    assert data.notes and "1 kernel-log event" in data.notes[0]
    assert td.clock_text(data, data.end) == "10:05:00" and td.clock_text(data, data.start) == "10:00:00"


def test_colon_goes_to_a_time_a_rank_and_a_node(sample_store):
    """`:` on the Timeline: a time moves the cursor there; `rank N` / `node NAME` select the lane."""
    from textual.widgets import Input

    from tests.tui_helpers import app_of, drive
    from postmortem.tui.screens.timeline import TimelineScreen

    app = app_of(sample_store("silent-deadlock-40r"), start="timeline")

    async def ask(pilot, text):
        await pilot.press("colon")
        await pilot.pause()
        pilot.app.screen.query_one("#ask-input", Input).value = text
        await pilot.press("enter")
        await pilot.pause()

    async def steps(pilot):
        for _ in range(300):
            await pilot.pause(0.05)
            if isinstance(app.screen, TimelineScreen) and app.screen.loaded:
                break
        lanes = app.screen.lanes
        await ask(pilot, "09:21")
        when = lanes.data.wall(lanes.cursor_t)
        await ask(pilot, "rank 30")
        rank = lanes.rows[lanes.selected]
        await ask(pilot, "node h20-node-02")
        node = lanes.rows[lanes.selected]
        return when, rank, node

    when, rank, node = drive(app, steps)
    assert (when.hour, when.minute) == (9, 21)
    assert rank.kind == "rank" and rank.rank == 30
    assert node.kind == "node" and node.node == "h20-node-02"
