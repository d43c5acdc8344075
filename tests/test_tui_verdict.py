"""The Verdict screen: the verdict names the culprit on open, the findings list drives the detail
pane, Enter opens the exact evidence line in the Logs screen, a healthy run shows no culprit and
no error, data with markup and escape sequences shows literally, and it reads at 80x24."""

from __future__ import annotations

import copy

from tests.tui_helpers import app_of, drive
from postmortem.tui.app import PostmortemApp
from postmortem.tui.screens.verdict import (EvidenceList, FindingsTable, VerdictScreen, finding_text,
                                 sorted_findings, summary_text, verdict_text)
from postmortem.tui.session import Session, open_store
from textual.widgets import Static

DEADLOCK = "silent-deadlock-40r"
CULPRIT_LOG = "logs/h20-node-03/4242_tnfzdf19/attempt_0/1/stderr.log"
PYSPY = "pyspy/h20-node-03/py-spy-413928.txt"
PAYLOAD = "[bold red]x[/] [link=http://e]y[/link] \x1b]0;pwn\x07"
PAYLOAD_SHOWN = "[bold red]x[/] [link=http://e]y[/link] \\x1b]0;pwn\\x07"


def shown(screen, selector: str) -> str:
    """The plain text a Static of the screen shows."""
    return str(screen.query_one(selector, Static).content)


def recording_app(app: PostmortemApp) -> list[tuple[str, int]]:
    """Replace ``app.show_line`` (the Logs screen is built elsewhere) by a recorder."""
    calls: list[tuple[str, int]] = []
    app.show_line = lambda path, line: calls.append((path, line))  # type: ignore[method-assign]
    return calls


def session_with(store_path, change) -> Session:
    """A session of the store whose report ``change(report)`` has modified."""
    session = open_store(store_path)
    report = copy.deepcopy(session.report)
    change(report)
    return Session(session.run, report, session.title)


def test_deadlock_names_the_culprit_on_open_and_lists_findings_by_severity(sample_store):
    app = app_of(sample_store(DEADLOCK))

    async def steps(pilot):
        screen = app.screen
        table = screen.query_one(FindingsTable)
        rows = [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]
        return (type(screen).__name__, shown(screen, "#verdict-head"), shown(screen, "#actions"),
                shown(screen, "#summary"), rows, table.has_focus, shown(screen, "#finding-text"))
    name, head, actions, summary, rows, focused, detail = drive(app, steps)
    assert name == "VerdictScreen" and focused
    assert head.startswith("Outcome hung, then ended from outside (scheduler (sacct): job state TIMEOUT)\n CULPRIT ")
    assert "Culprit rank 17 on h20-node-03 · GPU 1 (0000:2a:00.0)" in head
    assert "Rank 17 never entered the collective #7219" in head
    assert "GPU-hours lost: 201.1" in actions and "inspect, do not drain" in actions
    assert "40 ranks on 5 node(s) h20-node-[01-05] · H20 · NCCL 2.21.5" in summary
    assert "2026-07-24 08:00:00 → 14:22:53 (6h 22m)" in summary   # the torchrun agent starts the logs
    assert "38,240 lines: 38,218 parsed, 22 unparsed" in summary   # README.md and expected.json are not read
    assert "Missing no Flight Recorder dumps were read" in summary
    assert [r[:2] for r in rows] == [["error", "H001"], ["info", "P001"]]
    assert rows[0][3] == "17 @ h20-node-03" and rows[0][4] == "0.90" and rows[0][5] == "culprit"
    assert rows[1][3] == "job-wide" and rows[1][5] == ""
    assert detail.startswith("ERROR H001 rank-never-entered-collective")
    assert "Look at what rank 17 was doing instead" in detail  # the suggestion
    assert "culprit's main thread (py-spy, innermost first):\n  _init_group (torch/optim/adam.py:168)" in detail


def test_moving_in_the_findings_changes_the_detail_pane(sample_store):
    app = app_of(sample_store(DEADLOCK))

    async def steps(pilot):
        screen = app.screen
        evidence = screen.query_one(EvidenceList)
        before = shown(screen, "#finding-text"), evidence.option_count
        await pilot.press("down")
        after = shown(screen, "#finding-text"), evidence.option_count, shown(screen, "#evidence-heading")
        await pilot.press("up")
        return before, after, shown(screen, "#finding-text")
    before, after, back = drive(app, steps)
    assert before[0].startswith("ERROR H001") and before[1] == 3
    assert after[0].startswith("INFO P001 model-flops-utilization") and "MFU 8.3%" in after[0]
    assert after[1] == 1 and after[2].startswith("Evidence (1)")
    assert back == before[0]


def test_enter_opens_the_exact_evidence_line(sample_store):
    app = app_of(sample_store(DEADLOCK))
    calls = recording_app(app)

    async def steps(pilot):
        await pilot.press("enter")  # on the finding: its first evidence line
        await pilot.press("e", "down", "down")  # the third evidence line: the py-spy frame
        focused = type(app.focused).__name__
        await pilot.press("enter")
        await pilot.press("escape", "down", "enter")  # P001's only evidence line
        return focused
    assert drive(app, steps) == "EvidenceList"
    assert calls == [(CULPRIT_LOG, 771), (PYSPY, 5),
                     ("logs/h20-node-05/4242_wrhxmohg/attempt_0/7/stdout.log", 70)]


def test_healthy_run_shows_no_culprit_and_no_error(sample_store):
    app = app_of(sample_store("healthy-40r"))
    calls = recording_app(app)

    async def steps(pilot):
        screen = app.screen
        table = screen.query_one(FindingsTable)
        sevs = [str(table.get_row_at(i)[0]) for i in range(table.row_count)]
        markers = [str(table.get_row_at(i)[5]) for i in range(table.row_count)]
        actions = shown(screen, "#actions") if screen.query("#actions") else ""
        return (shown(screen, "#verdict-head"), actions, sevs, markers,
                shown(screen, "#findings-heading"))
    head, actions, sevs, markers, heading = drive(app, steps)
    assert head.startswith("Outcome completed\n HEALTHY ") and "Culprit" not in head and "Culprit" not in actions
    assert "error" not in sevs and "warn" not in sevs and sevs
    assert all("culprit" not in m for m in markers)
    assert heading == "Findings 1 info" and calls == []


def test_a_caused_finding_names_its_cause_and_c_goes_to_it(sample_store):
    def symptom(report):
        report["findings"][1]["caused_by"] = ["a0-H001-1"]
    app = PostmortemApp(session=session_with(sample_store(DEADLOCK), symptom), theme="textual-dark")

    async def steps(pilot):
        table = app.screen.query_one(FindingsTable)
        await pilot.press("down")
        marker, detail = str(table.get_row_at(1)[5]), shown(app.screen, "#finding-text")
        await pilot.press("c")
        return marker, detail, table.cursor_row
    marker, detail, row = drive(app, steps)
    assert marker == "← H001"
    assert "Caused by H001 rank 17 never entered the collective #7219 (default_pg)" in detail
    assert row == 0


def test_markup_and_escapes_in_the_report_show_literally(sample_store):
    def inject(report):
        f = report["findings"][0]
        f["title"] = f["message"] = f["suggestion"] = PAYLOAD
        f["evidence"][0]["text"] = f["evidence"][0]["note"] = PAYLOAD
        f["details"]["culprit_did_instead"]["last_lines"] = [PAYLOAD]
        report["verdict"]["sentence"] = PAYLOAD
        report["missing_evidence"] = [{"what": PAYLOAD, "enable": PAYLOAD}]
    session = session_with(sample_store(DEADLOCK), inject)
    app = PostmortemApp(session=session, theme="textual-dark")

    async def steps(pilot):
        screen = app.screen
        evidence = screen.query_one(EvidenceList)
        prompt = evidence.get_option_at_index(0).prompt
        title_cell = screen.query_one(FindingsTable).get_row_at(0)[2]
        texts = [screen.query_one(s, Static).content for s in ("#verdict-head", "#summary", "#finding-text")]
        return texts + [prompt, title_cell], app.export_screenshot()
    texts, svg = drive(app, steps)
    for text in texts:
        assert PAYLOAD_SHOWN[:30] in text.plain, text.plain  # the table cell may be cut after that
        assert "\x1b" not in text.plain and "\x07" not in text.plain
        assert not any("link" in str(span.style) for span in text.spans)
    assert "http://e" not in svg.replace("[link=http://e]", "")  # no hyperlink was made
    # and the pure helpers say the same
    report = session.report
    assert PAYLOAD_SHOWN in verdict_text(report).plain and PAYLOAD_SHOWN in summary_text(report).plain
    assert finding_text(sorted_findings(report)[0], {}).plain.count(PAYLOAD_SHOWN) >= 4


def test_at_80x24_the_findings_and_details_stay_usable_and_v_shows_the_verdict_whole(sample_store):
    app = app_of(sample_store(DEADLOCK))
    calls = recording_app(app)

    async def steps(pilot):
        screen = app.screen
        table, text = screen.query_one(FindingsTable), screen.query_one("#finding-text")
        evidence = screen.query_one(EvidenceList)
        sizes = {"narrow": screen.has_class("-narrow"), "table": table.region.height,
                 "text": screen.query_one("#finding-scroll").region.height, "evidence": evidence.region.height}
        await pilot.press("v")
        full = screen.query_one("#verdict").region.height, table.display is False or table.region.height == 0
        await pilot.press("v")
        await pilot.pause()
        back = table.has_focus, table.region.height
        await pilot.press("down", "enter")
        return sizes, full, back, text.region.width
    sizes, full, back, width = drive(app, steps, size=(80, 24))
    assert sizes["narrow"] and sizes["table"] >= 3 and sizes["text"] >= 3 and sizes["evidence"] >= 3
    assert full[0] >= 18 and full[1]
    assert back[0] and back[1] >= 3
    assert width >= 70
    assert calls == [("logs/h20-node-05/4242_wrhxmohg/attempt_0/7/stdout.log", 70)]


def test_screen_is_registered_and_documents_its_keys():
    keys = {b.key for b in VerdictScreen.BINDINGS}
    assert {"enter", "e", "v", "c"} <= keys
    assert sum(1 for b in VerdictScreen.BINDINGS if b.show) <= 3


def test_snapshot_deadlock_as_opened(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK)), terminal_size=(120, 40))


def test_snapshot_deadlock_evidence_selected(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK)), press=["e", "down"], terminal_size=(120, 40))


def test_snapshot_deadlock_at_80x24(snap_compare, sample_store):
    assert snap_compare(app_of(sample_store(DEADLOCK)), terminal_size=(80, 24))


def test_snapshot_deadlock_stack_shown(snap_compare, sample_store):
    """`s`: the details at the culprit's stack, the focused details marked by a bar at their left."""
    assert snap_compare(app_of(sample_store(DEADLOCK)), press=["s"], terminal_size=(120, 40))


def test_the_focused_pane_is_marked(sample_store):
    """Focus between the panes is visible: the findings' or the evidence's heading is drawn in
    the focused cursor's colours while its pane has the focus, the details get a bar at their
    left; the other panes are drawn plain."""
    app = app_of(sample_store(DEADLOCK))

    def looks(screen):
        def background(selector):
            return screen.query_one(selector).styles.background
        return (background("#findings-heading"), background("#evidence-heading"),
                screen.query_one("#finding-scroll").styles.border_left[0])

    async def steps(pilot):
        screen = app.screen
        await pilot.pause(0.1)   # the table's focus is styled on the next refresh
        seen = {"findings": looks(screen)}
        await pilot.press("e")
        await pilot.pause()
        seen["evidence"] = looks(screen)
        await pilot.press("s")
        await pilot.pause()
        seen["details"] = looks(screen)
        return seen, screen.styles.background
    seen, plain_bg = drive(app, steps)
    findings, evidence, details = seen["findings"], seen["evidence"], seen["details"]
    assert findings[0] != findings[1] and findings[0].a > 0 and findings[2] == "blank"
    assert evidence[1] == findings[0] and evidence[0] == findings[1] and evidence[2] == "blank"
    assert details[0] == details[1] == findings[1] and details[2] == "tall"


def _evidence_pane_lines(app) -> list[str]:
    """The evidence list's rendered lines, as the screen shows them (from a screenshot)."""
    from tests.tui_helpers import svg_screen_lines

    region = app.screen.query_one(EvidenceList).region
    screen = svg_screen_lines(app.export_screenshot())
    return [(screen[y] if y < len(screen) else "")[region.x:region.right].rstrip()
            for y in range(region.y, region.bottom)]


def test_an_evidence_path_line_never_wraps_inside_itself(sample_store):
    """At 120 and 80 columns each evidence line's `path:line` is on one screen line, whole (the
    path cut from the left with …); no screen line ends inside one: at 120 columns the pane once
    showed `…/stderr.log:77` then `1 · rank 17`, which reads as line 77."""
    import re

    from postmortem.tui.screens.verdict import path_line

    for size in ((120, 40), (80, 24), (100, 30)):
        app = app_of(sample_store(DEADLOCK))

        async def steps(pilot):
            await pilot.press("e")   # the evidence list scrolls: look at each line in turn
            seen = []
            for _ in range(3):
                await pilot.pause()
                seen += _evidence_pane_lines(app)
                await pilot.press("down")
            return seen, app.screen.query_one(EvidenceList).prompt_width
        lines, width = drive(app, steps, size=size)
        evidence = sorted_findings(app.session.report)[0]["evidence"]
        wanted = {f"{e['path']}:{e['line']}" for e in evidence}
        for e in evidence:
            unit = path_line(e["path"], e["line"], width)
            assert len(unit) <= width and unit.endswith(f":{e['line']}")
            assert any(re.search(re.escape(unit) + r"(\s|$)", line) for line in lines), (size, unit, lines)
        for line in lines:
            for m in re.finditer(r"(…?[\w./-]+\.(?:log|txt|out)):(\d+)", line):
                token = m.group(0).lstrip("…")
                assert any(w.endswith(token) for w in wanted), (size, m.group(0), line)


def test_s_shows_the_culprits_whole_stack_and_is_named_on_screen(sample_store):
    """One key, named in the footer and in the headline's hint: `s` selects the culprit finding
    and scrolls its details to the py-spy stack (from any finding, at 120 and 80 columns). A run
    without a culprit stack does not offer the key."""
    from tests.tui_helpers import svg_screen_lines

    for size in ((120, 40), (80, 24)):
        app = app_of(sample_store(DEADLOCK))

        async def steps(pilot):
            await pilot.press("down")          # on P001: s goes back to the culprit's finding
            await pilot.press("s")
            await pilot.pause()
            screen = app.screen
            box = screen.query_one("#finding-scroll")
            shot = svg_screen_lines(app.export_screenshot())
            inside = box.content_region   # inside the bar that marks the focused pane
            top = shot[inside.y][inside.x:inside.right].strip()
            below = shot[inside.y + 1][inside.x:inside.right].strip()
            return (shot[-1], shown(screen, "#verdict-head"), screen.query_one(FindingsTable).cursor_row,
                    box.has_focus, top, below)
        footer, head, row, focused, top, below = drive(app, steps, size=size)
        assert " s Stack " in footer and "(innermost frame; s: the whole stack)" in head
        assert row == 0 and focused, size
        assert top == "culprit's main thread (py-spy, innermost first):", (size, top)
        assert below == "_init_group (torch/optim/adam.py:168)", (size, below)

    app = app_of(sample_store("healthy-40r"))

    async def healthy(pilot):
        await pilot.press("s")
        return svg_screen_lines(app.export_screenshot())[-1], app.focused
    footer, focused = drive(app, healthy)
    assert "Stack" not in footer and isinstance(focused, FindingsTable)


def test_py_spy_stacks_carry_the_rank_their_pid_maps_to(sample_store):
    """stacks.rank is filled for every py-spy dump whose pid `ranks` maps (the culprit's own
    dump, pid 413928, is rank 17), so the Logs rank filter keeps the culprit's stack."""
    import duckdb

    con = duckdb.connect(str(sample_store(DEADLOCK)), read_only=True)
    try:
        unmapped = con.execute("""SELECT count(*) FROM stacks s JOIN inputs i USING (input_id)
                                  WHERE i.path LIKE 'pyspy/%' AND s.rank IS NULL""").fetchone()[0]
        culprit = con.execute("SELECT DISTINCT rank FROM stacks WHERE pid = 413928").fetchall()
        agree = con.execute("""SELECT count(*) FROM (SELECT DISTINCT s.pid, s.node, s.rank FROM stacks s
                               JOIN ranks r ON r.pid = s.pid AND r.node = s.node WHERE s.rank IS DISTINCT FROM r.rank)
                            """).fetchone()[0]
        culprit_lines = con.execute(f"SELECT count(*) FROM lines l JOIN inputs i USING (input_id) "
                                    f"WHERE i.path = '{PYSPY}' AND l.rank = 17").fetchone()[0]
    finally:
        con.close()
    assert unmapped == 0 and culprit == [(17,)] and agree == 0 and culprit_lines > 0


def test_evidence_path_lines_are_refitted_when_the_pane_is_resized(sample_store):
    """Cut to the 120-column pane, whole again at 80 columns (the list, full width there, is laid
    out after the screen: it refits on its own resize)."""
    app = app_of(sample_store(DEADLOCK))
    full = "logs/h20-node-03/4242_tnfzdf19/attempt_0/1/stderr.log:771"

    async def steps(pilot):
        await pilot.pause()
        wide = _evidence_pane_lines(app)
        await pilot.resize_terminal(80, 24)
        await pilot.pause(0.2)
        return wide, _evidence_pane_lines(app)
    wide, narrow = drive(app, steps)
    assert any(line.startswith("…/h20-node-03/4242_tnfzdf19/attempt_0/1/stderr.log:771") for line in wide)
    assert any(line.startswith(full + " ") for line in narrow), narrow
