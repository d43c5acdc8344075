"""The TUI shell: modes switch by key, help lists every screen's keys, the store's report is
read back, loading from paths shows progress then the verdict."""

from __future__ import annotations

import duckdb
import pytest

from tests.tui_helpers import app_of, drive
from postmortem.analyzer import cache
from postmortem.tui.app import SCREENS, PostmortemApp, help_markdown
from postmortem.tui.session import StoreError, open_store


def test_each_key_switches_to_its_screen(sample_store):
    app = app_of(sample_store("slow-ring"))

    async def steps(pilot):
        seen = []
        for name, (key, _, _) in SCREENS.items():
            await pilot.press(key)
            await pilot.pause()
            seen.append((app.current_mode, type(app.screen).__name__))
        return seen
    seen = drive(app, steps)
    assert [mode for mode, _ in seen] == list(SCREENS)
    assert all(cls.lower().startswith(mode[:3]) for mode, cls in seen)


def test_help_lists_every_screen_and_its_keys(sample_store):
    text = help_markdown()
    for key, label, _ in SCREENS.values():
        assert f"## {key} · {label}" in text
    app = app_of(sample_store("slow-ring"))

    async def steps(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        shown = type(app.screen).__name__
        await pilot.press("escape")
        await pilot.pause()
        return shown, type(app.screen).__name__
    assert drive(app, steps) == ("HelpScreen", "VerdictScreen")


def test_store_without_a_report_is_refused_with_the_reason(tmp_path):
    db = tmp_path / "old.duckdb"
    con = duckdb.connect(str(db))
    con.execute("CREATE TABLE lines (x INT)")
    con.close()
    with pytest.raises(StoreError, match="no report in this store"):
        open_store(db)
    with pytest.raises(StoreError, match="no such database"):
        open_store(tmp_path / "missing.duckdb")


async def _until_the_verdict(pilot, tries: int = 600) -> None:
    """Wait (up to 30 s) until an app loading from paths shows its verdict."""
    app = pilot.app
    for _ in range(tries):
        await pilot.pause(0.05)
        if app.session is not None and app.current_mode == "verdict":
            return


def test_loading_from_paths_shows_progress_then_the_verdict(tmp_path):
    from tests.conftest import ROOT

    app = PostmortemApp(paths=[str(ROOT / "sample_logs" / "rendezvous-missing-node")])

    async def steps(pilot):
        await _until_the_verdict(pilot)
        return app.session.report["verdict"]["status"], app.current_mode
    status, mode = drive(app, steps)
    assert mode == "verdict" and status


def test_a_folder_with_nothing_readable_exits_with_the_reason(tmp_path):
    app = PostmortemApp(paths=[str(tmp_path)])

    async def steps(pilot):
        for _ in range(200):
            await pilot.pause(0.05)
            if app.failure:
                break
        return app.failure
    assert "nothing readable" in (drive(app, steps) or "").lower() or "no input" in (app.failure or "")


def test_help_scrolls_and_shows_the_current_screens_keys_first(sample_store):
    """The help is longer than the screen: it scrolls with the keys (j, page down, G) and opens
    on the current screen's section."""
    from textual.containers import VerticalScroll

    assert help_markdown(first="logs").startswith("## This screen: 6 · Logs")
    app = app_of(sample_store("slow-ring"), start="logs")

    async def steps(pilot):
        await pilot.press("question_mark")
        await pilot.pause()
        box = app.screen.query_one("#help-scroll", VerticalScroll)
        tops = [box.scroll_y]
        for key in ("j", "j", "pagedown", "G"):
            await pilot.press(key)
            await pilot.pause()
            tops.append(box.scroll_y)
        return tops, box.max_scroll_y, box.has_focus

    tops, bottom, focused = drive(app, steps, size=(80, 24))
    assert focused and bottom > 0
    assert tops[0] == 0 and tops[1] > 0 and tops[3] > tops[2] > tops[1] and tops[4] == bottom


def test_vim_keys_move_like_the_arrows(sample_store):
    from textual.widgets import DataTable

    app = app_of(sample_store("silent-deadlock-40r"))

    async def steps(pilot):
        table = app.screen.query_one("#findings", DataTable)
        table.focus()
        rows = [table.cursor_row]
        for keys in (("j",), ("j",), ("k",), ("G",), ("g", "g")):
            await pilot.press(*keys)
            await pilot.pause()
            rows.append(table.cursor_row)
        return rows, table.row_count

    rows, count = drive(app, steps)
    assert count >= 2
    down2 = min(2, count - 1)
    assert rows == [0, 1, down2, down2 - 1, count - 1, 0]


def test_quit_while_loading_exits_cleanly_and_stops_the_load(tmp_path, monkeypatch):
    """q (or ctrl+c) during a cold load: the app exits at once with no error, and the load stops
    at its next progress step instead of running on in its thread. The load is held at a
    progress step until the key is pressed: a fast machine would otherwise finish the sample
    before the key, and the test would test nothing."""
    import threading
    import time

    import postmortem.tui.app as app_module
    from tests.conftest import ROOT

    pressed, raised = threading.Event(), []
    real = app_module.analyze_paths

    def held(paths, progress=None, **options):
        def step(line):
            pressed.wait(10)
            progress(line)
        try:
            return real(paths, progress=step, **options)
        except BaseException as exc:
            raised.append(type(exc).__name__)
            raise

    monkeypatch.setattr(app_module, "analyze_paths", held)
    app = PostmortemApp(paths=[str(ROOT / "sample_logs" / "silent-deadlock-40r")])

    async def steps(pilot):
        await pilot.pause(0.3)
        shown = str(app.query_one("#loading-progress").render())
        await pilot.press("ctrl+c")
        pressed.set()
        return shown

    shown = drive(app, steps)
    assert app.cancelled and app.failure is None and app.return_code in (None, 0)
    for _ in range(200):     # the load's thread, let go, stops at its next progress step
        if raised:
            break
        time.sleep(0.05)
    assert raised == ["LoadCancelled"]
    assert " s" in shown and any(ch in shown for ch in "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏")   # a spinner and the time spent


def test_a_run_loaded_with_the_cache_on_writes_its_entry_after_the_first_screen(tmp_path, monkeypatch):
    """The cache entry is copied once the verdict is up (not beside the rules, where it slowed
    the first screen down), on one DuckDB thread; a query of the user's waits for it, so it
    never sees the entry's file attached; the CLI waits for it after the app exits."""
    from tests.conftest import ROOT
    from tests.test_tui_sql import run_sql

    monkeypatch.setenv("POSTMORTEM_CACHE", "on")
    monkeypatch.setenv("POSTMORTEM_CACHE_DIR", str(tmp_path / "cache"))
    app = PostmortemApp(paths=[str(ROOT / "sample_logs" / "rendezvous-missing-node")])

    async def steps(pilot):
        await _until_the_verdict(pilot)
        prepared = app.session.run.pending_cache is not None
        await pilot.press("7")
        await pilot.pause()
        result = await run_sql(pilot, "SELECT (SELECT count(*) FROM duckdb_databases() WHERE NOT internal), "
                                      "current_setting('threads')")
        return prepared, result
    prepared, result = drive(app, steps)
    assert prepared and result.error is None and result.rows == [(1, 1)]
    app.finish_cache()
    assert app.session.run.pending_cache is None
    assert len(cache.entries(tmp_path / "cache")) == 1


def test_quitting_while_the_cache_entry_is_written_says_so_and_waits(sample_store):
    """The command line waits for the cache entry after the app exits; while there is still a
    wait it says why, in one line (the terminal is back by then)."""
    import threading
    import time

    app = app_of(sample_store("slow-ring"))
    writing = threading.Thread(target=time.sleep, args=(0.3,))
    writing.start()
    app.session.run.pending_cache = writing
    said = []
    app.finish_cache(say=said.append)
    assert not writing.is_alive() and app.session.run.pending_cache is None
    assert said == ["postmortem: saving this analysis for the next open ..."]
    app.finish_cache(say=said.append)      # nothing left: nothing said
    assert len(said) == 1
