"""Shared by the TUI tests: open a sample's store in the app and drive it with Pilot.

Pilot tests are plain functions that call ``drive(app, steps)``: ``steps`` is an async function
taking the pilot (no async test plugin needed). Snapshot tests use ``snap_compare`` from
pytest-textual-snapshot at 120x40 with ``app_of(...)``.
"""

from __future__ import annotations

import asyncio

from postmortem.tui.app import PostmortemApp
from postmortem.tui.session import open_store

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
    (which sets column widths) or a scroll waiting for that pass: a screenshot before then
    shows what a user sees only for a moment."""
    from textual.widgets import DataTable

    return any(t._require_update_dimensions or t._updated_cells or t._new_rows
               or _short_of_target(t)
               for t in app.screen.query(DataTable))


def _short_of_target(table) -> bool:
    """A ``postmortem.tui.screens.base.Table`` not yet scrolled to the line it was asked for (as far as
    its height allows)."""
    target = getattr(table, "scroll_target", None)
    return target is not None and table.scroll_y != min(target, table.max_scroll_y)


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


def svg_screen_lines(svg: str) -> list[str]:
    """The characters of a Textual SVG screenshot, a string per terminal line (colours left
    out), so that a snapshot that differs can say where in words."""
    import html
    import re

    lines: dict[int, dict[int, str]] = {}
    for m in re.finditer(r'<text [^>]*x="([\d.]+)"[^>]*clip-path="url\(#[\w-]*-line-(\d+)\)">(.*?)</text>', svg):
        column, line = round(float(m.group(1)) / 12.2), int(m.group(2))
        for offset, char in enumerate(html.unescape(m.group(3)).replace("\xa0", " ")):
            lines.setdefault(line, {})[column + offset] = char
    return ["".join(row.get(x, " ") for x in range(max(row) + 1)).rstrip() if row else ""
            for row in (lines.get(y, {}) for y in range(max(lines, default=-1) + 1))]
