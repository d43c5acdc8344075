"""The TUI shell: modes switch by key, help lists every screen's keys, the store's report is
read back, loading from paths shows progress then the verdict."""

from __future__ import annotations

import duckdb
import pytest

from tests.tui_helpers import app_of, drive
from tui.app import SCREENS, PostmortemApp, help_markdown
from tui.session import StoreError, open_store


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


def test_loading_from_paths_shows_progress_then_the_verdict(tmp_path):
    from tests.conftest import ROOT

    app = PostmortemApp(paths=[str(ROOT / "sample_logs" / "rendezvous-missing-node")])

    async def steps(pilot):
        for _ in range(600):
            await pilot.pause(0.05)
            if app.session is not None and app.current_mode == "verdict":
                break
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
