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
