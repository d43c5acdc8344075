"""``postmortem.tui.screens.base.Table``: a table painted before its rows were measured is repainted at the
measured width (plain Textual 8.2 keeps the cells it drew at the header's width, cut to ``…``;
CI saw this on the SQL and environment screens)."""

from __future__ import annotations

from rich.text import Text
from textual.app import App

from tests.tui_helpers import drive
from postmortem.tui.screens.base import Table

VALUE = "a value wider than its header"


class OneTable(App):
    CSS = "Table { height: 1fr; }"  # a fixed size: measuring the rows does not resize it

    def compose(self):
        yield Table()


def numbered(app: OneTable, rows: int) -> Table:
    """The app's table with one column ``n`` and ``rows`` rows numbered from 0."""
    table = app.query_one(Table)
    table.add_column("n")
    table.add_rows([[str(i)] for i in range(rows)])
    return table


def test_cells_painted_before_measuring_are_repainted_at_full_width():
    app = OneTable()

    async def steps(pilot):
        table = app.query_one(Table)
        table.add_column("t")
        table.add_rows([[Text(VALUE, no_wrap=True, overflow="ellipsis")]])
        early = table.render_line(1).text  # a paint that comes before the idle pass
        await pilot.pause(0.1)
        return early, table.render_line(1).text
    early, late = drive(app, steps)
    assert VALUE not in early  # the race did happen: the first paint was cut
    assert VALUE in late


def test_a_scroll_asked_before_the_layout_settles_ends_where_asked():
    app = OneTable()

    async def steps(pilot):
        table = numbered(app, 40)
        table.scroll_when_measured(12)      # the table is as tall as the screen: room for 4 only
        await pilot.pause(0.1)
        stopped_short = table.scroll_y
        table.styles.height = 10            # the layout changes after: now there is room
        await pilot.pause(0.1)
        reached = table.scroll_y
        table.move_cursor(row=table.cursor_row + 1)  # the user moves on: no more scrolling for it
        table.styles.height = 20
        await pilot.pause(0.1)
        return stopped_short, reached, table.scroll_target
    stopped_short, reached, target = drive(app, steps)
    assert stopped_short < 12 and reached == 12 and target is None


def test_the_cursor_stays_in_sight_when_the_table_gets_smaller():
    app = OneTable()

    async def steps(pilot):
        table = numbered(app, 30)
        await pilot.pause(0.1)
        table.move_cursor(row=29)
        await pilot.pause(0.1)
        await pilot.resize_terminal(120, 12)
        await pilot.pause(0.2)
        top = int(table.scroll_y)
        return top, top + table.size.height - 1   # the first and last row in sight (one header line)
    first, last = drive(app, steps)
    assert first <= 29 < last


def test_clearing_the_rows_drops_a_scroll_asked_for_them():
    app = OneTable()

    async def steps(pilot):
        table = numbered(app, 40)
        table.scroll_when_measured(12)
        table.clear()
        table.add_rows([[str(i)] for i in range(60)])
        await pilot.pause(0.1)
        return table.scroll_target, table.scroll_y
    target, y = drive(app, steps)
    assert target is None and y == 0
