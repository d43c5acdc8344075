"""Shared by the TUI tests: open a sample's store in the app and drive it with Pilot.

Pilot tests are plain functions that call ``drive(app, steps)``: ``steps`` is an async function
taking the pilot (no async test plugin needed). Snapshot tests use ``snap_compare`` from
pytest-textual-snapshot at 120x40 with ``app_of(...)``.
"""

from __future__ import annotations

import asyncio

from tui.app import PostmortemApp
from tui.session import open_store

SIZE = (120, 40)


def app_of(store_path, start: str = "verdict", theme: str = "textual-dark") -> PostmortemApp:
    return PostmortemApp(session=open_store(store_path), start=start, theme=theme)


def drive(app: PostmortemApp, steps, size=SIZE):
    """Run ``app`` headless at ``size``, await ``steps(pilot)`` and return what it returns."""
    async def main():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            result = await steps(pilot)
            await pilot.pause()
            return result
    return asyncio.run(main())


def tables_pending(app) -> bool:
    """Whether a DataTable on the screen still has rows or cells waiting for its idle pass
    (which sets column widths): a render before that shows cut cells."""
    from textual.widgets import DataTable

    return any(t._require_update_dimensions or t._updated_cells or t._new_rows
               for t in app.screen.query(DataTable))


async def settle(pilot, loaded=lambda app: True, tries: int = 500) -> None:
    """Wait until ``loaded(app)`` holds, no worker runs and every table has been measured.

    One ``pause()`` is not enough on a loaded machine: the screen may not have mounted (so no
    worker exists yet to wait for) or the tables' idle pass may not have run; CI saw both."""
    for _ in range(tries):
        await pilot.pause(0.02)
        await pilot.app.workers.wait_for_complete()
        if loaded(pilot.app) and not tables_pending(pilot.app):
            break
    await pilot.pause()

