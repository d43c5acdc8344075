"""The Logs screen: the merged lines of every input, filtered by rank, node, level and regex,
with search and go-to-line.

The list is a virtual one (Textual's Line API: ``LogView.render_line`` draws only the rows on
screen, a page at a time from ``postmortem.views.log_data``), so a run of millions of lines opens as fast
as a small one. Building the index, filtering and searching run in a worker thread; only
page reads (a few ms) happen while painting. The order and how levels and regexes are
decided are documented in ``postmortem.views.log_data``.
"""

from __future__ import annotations

import re
import threading

import duckdb
from dataclasses import dataclass, field, replace

from rich.style import Style
from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Input, Label, Static

from postmortem.views.log_data import (DEBUG, ERROR, LEVELS, WARN, Filters, LogData, LogRow, display_text, parse_nodes,
                          parse_ranks, python_regex, source_label)
from postmortem.tui.screens.base import BaseScreen
from postmortem.tui.session import NO_MOMENT, moment_of
from postmortem.tui.text import join, plain

LEVEL_MARK = {ERROR: "E", WARN: "W", DEBUG: "D"}
LEVEL_CLASS = {ERROR: "logview--error", WARN: "logview--warn", DEBUG: "logview--debug"}


class LogView(ScrollView, can_focus=True):
    """Rows of a ``LogData`` view: a fixed gutter (level, source, line number), then the text,
    cut at the right edge and scrolled sideways."""

    COMPONENT_CLASSES = {"logview--cursor", "logview--gutter", "logview--error", "logview--warn",
                         "logview--debug", "logview--match"}
    DEFAULT_CSS = """
    LogView { height: 1fr; background: $surface; }
    LogView > .logview--cursor { background: $block-cursor-blurred-background; }
    LogView:focus > .logview--cursor { background: $block-cursor-background; color: $block-cursor-foreground; }
    LogView > .logview--gutter { color: $text-muted; }
    LogView > .logview--error { color: $error; text-style: bold; }
    LogView > .logview--warn { color: $warning; }
    LogView > .logview--debug { color: $text-muted; }
    LogView > .logview--match { background: $warning-muted; text-style: bold underline; }
    """
    BINDINGS = [
        Binding("up", "move(-1)", "Up", show=False),
        Binding("down", "move(1)", "Down", show=False),
        Binding("pageup", "page(-1)", "Page up", show=False),
        Binding("pagedown", "page(1)", "Page down", show=False),
        Binding("home", "edge(0)", "First line", show=False),
        Binding("end", "edge(1)", "Last line", show=False),
        Binding("left", "sideways(-8)", "Scroll left", show=False),
        Binding("right", "sideways(8)", "Scroll right", show=False),
    ]

    cursor: reactive[int] = reactive(0, layout=False, repaint=True)

    class CursorMoved(Message):
        pass

    def __init__(self, data: LogData, **kwargs):
        super().__init__(**kwargs)
        self.data = data
        self.missing = False  # a row could not be read (a worker held the store): repaint later

    @property
    def gutter_width(self) -> int:
        return 2 + self.data.source_width + 1 + self.data.line_digits + 1

    def reset(self) -> None:
        """The view changed (filters, order): new size, cursor kept in range."""
        count = self.data.state.count
        self.virtual_size = Size(self.gutter_width + self.data.max_width, count)
        self.cursor = min(self.cursor, max(count - 1, 0))
        self.missing = False
        self.refresh()

    def move_to(self, pos: int, centre: bool = False, later: bool = False) -> None:
        """Select row ``pos`` and scroll it into view (``centre``: mid-screen when it was off
        screen; ``later``: after the next refresh, once a new virtual size is laid out)."""
        count = self.data.state.count
        if count == 0:
            return
        self.cursor = max(0, min(pos, count - 1))
        if later:
            self.call_after_refresh(self._scroll_to_cursor, centre)
        else:
            self._scroll_to_cursor(centre)
        self.post_message(self.CursorMoved())

    def _scroll_to_cursor(self, centre: bool, tries: int = 3) -> None:
        if tries and not self.allow_vertical_scroll and self.virtual_size.height > self.scrollable_content_region.height:
            # A new virtual size whose scrollbar is not laid out yet: Textual would ignore the
            # scroll (the view stayed at the top on a loaded machine), and the height the
            # scrollbar takes is not known. Scroll after the refresh that lays it out.
            self.call_after_refresh(self._scroll_to_cursor, centre, tries - 1)
            return
        top, height = round(self.scroll_y), max(self.scrollable_content_region.height, 1)
        if centre and not top <= self.cursor < top + height:
            self.scroll_to(y=max(self.cursor - height // 2, 0), animate=False, immediate=True)
        elif self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True)

    def action_move(self, step: int) -> None:
        self.move_to(self.cursor + step)

    def action_page(self, direction: int) -> None:
        self.move_to(self.cursor + direction * max(self.scrollable_content_region.height - 1, 1))

    def action_edge(self, end: int) -> None:
        self.move_to(self.data.state.count - 1 if end else 0)

    def action_sideways(self, step: int) -> None:
        self.scroll_to(x=max(self.scroll_x + step, 0), animate=False)

    def on_click(self, event: events.Click) -> None:
        self.move_to(round(self.scroll_y) + event.y)

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        pos, width = scroll_y + y, self.scrollable_content_region.width
        base = self.rich_style
        row = self.data.row(pos) if pos < self.data.state.count else None
        if row is None:
            self.missing = self.missing or pos < self.data.state.count
            return Strip.blank(width, base)
        gutter = Strip(self._gutter(row).render(self.app.console)).adjust_cell_length(self.gutter_width)
        body = Strip(self._body(row).render(self.app.console))
        body = body.crop_extend(scroll_x, scroll_x + max(width - self.gutter_width, 0), None)
        strip = Strip.join([gutter, body])
        if pos == self.cursor:
            strip = strip.apply_style(self.get_component_rich_style("logview--cursor"))
        return strip.apply_style(base)

    def _gutter(self, row: LogRow) -> Text:
        mark = LEVEL_MARK.get(row.level, " ")
        level_style = self._style_of(row.level)
        return join((mark + " ", level_style),
                    (f"{source_label(row, self.data.source_width):<{self.data.source_width}} "
                     f"{row.line_no:>{self.data.line_digits}} ",
                     self.get_component_rich_style("logview--gutter")))

    def _body(self, row: LogRow) -> Text:
        text = plain(display_text(row.text), self._style_of(row.level))
        text.no_wrap = True
        pattern = self.data.pattern
        if pattern is not None:
            match_style = self.get_component_rich_style("logview--match")
            for m in pattern.finditer(text.plain):
                if m.end() > m.start():
                    text.stylize(match_style, m.start(), m.end())
        return text

    def _style_of(self, level: int) -> Style | str:
        name = LEVEL_CLASS.get(level)
        return self.get_component_rich_style(name) if name else ""


@dataclass
class Want:
    """What the user asked for; a worker makes the store's view match it."""
    filters: Filters = field(default_factory=Filters)
    order: str = "time"
    search: str = ""
    goto: tuple[str, int] | None = None  # (inputs.path, line_no)
    keep: tuple[int, int] | None = None  # (input_id, line_no) of the cursor line
    to_hit: int = 0  # after the search: 1 next match, -1 previous, 0 stay


class LogsScreen(BaseScreen):
    TITLE_NAME = "Logs"
    HELP = """The merged lines of every input, by time (a line takes the time of the last stamped
line before it in its file; files without times first) or by file (`t`). The gutter shows the
level (E error, W warning, D debug), the source (rank `r12`, else node, else file) and the line
number; the bar below the list, the count of lines shown, the filters and where the selected
line comes from. Filters combine: rank (`0-7,12`), node (names or globs, `h20-node-0*`), level
(at least INFO, WARN, ERROR) and a regex over the text (lower-case patterns ignore case; NCCL
INFO lines are read back from their files to be matched). Go to (`:`) accepts `path:line` (a path
or its unique tail), a line number of the current file, a time (`09:21`, `09:21:30`,
`2026-07-24 09:21`: the first line at or after it, in time order), `rank 17` or `node NAME` (the
first line of that rank or node in the view). Log text is shown as written: markup is
not interpreted, control characters show as `\\xNN`, tabs are expanded, long lines are cut
(left and right scroll)."""
    BINDINGS = [
        Binding("slash", "ask('search')", "Search"),
        Binding("f", "ask('regex')", "Filter"),
        Binding("colon", "ask('goto')", "Goto"),
        Binding("H", "moment('hang')", "Hang",
                tooltip="Go to the hang's start: the first line at the last step or counter advance (in time order)"),
        Binding("F", "moment('failure')", "1st failure", tooltip="Go to the first timeout or error line"),
        Binding("n", "hit(1)", "Next match", show=False),
        Binding("N", "hit(-1)", "Previous match", show=False),
        Binding("r", "ask('ranks')", "Filter by rank (0-7,12)", show=False),
        Binding("h", "ask('nodes')", "Filter by node (names or globs)", show=False),
        Binding("l", "cycle_level", "Minimum level: all, INFO, WARN, ERROR", show=False),
        Binding("c", "clear", "Clear the filters", show=False),
        Binding("t", "toggle_order", "Order by time or by file", show=False),
        Binding("escape", "escape", "Close the prompt, else clear the search", show=False),
    ]
    DEFAULT_CSS = """
    LogsScreen #logs-status { height: 2; background: $panel; color: $text; padding: 0 1; }
    LogsScreen #logs-prompt { height: 1; display: none; background: $panel; }
    LogsScreen #logs-prompt.shown { display: block; }
    LogsScreen #logs-prompt Label { width: auto; padding: 0 1; color: $accent; text-style: bold; }
    LogsScreen #logs-prompt Input { border: none; height: 1; width: 1fr; padding: 0; }
    """
    PROMPTS = {"search": "Search /", "regex": "Filter regex", "ranks": "Ranks", "nodes": "Nodes",
               "goto": "Go to (path:line, line, 09:21, rank 17, node NAME)"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.want = Want()
        self._seq = 0
        self._op_lock = threading.Lock()
        self._busy = False
        self._asking = ""
        self._opened = False
        self.data: LogData | None = None

    def compose_body(self) -> ComposeResult:
        self.data = LogData(self.session.cursor())
        yield LogView(self.data, id="logs-view")
        with Horizontal(id="logs-prompt"):
            yield Label(plain(""), id="logs-prompt-label")
            yield Input(id="logs-prompt-input", select_on_focus=False)
        yield Static(plain(""), id="logs-status")

    def on_mount(self) -> None:
        self.query_one(LogView).focus()
        self._request()

    @property
    def view(self) -> LogView:
        return self.query_one(LogView)

    # -- the contract with App.show_line --------------------------------------------------
    def goto(self, path: str, line_no: int) -> None:
        """Show ``path``'s line ``line_no`` (1-based, as in Evidence.line) selected; filters
        that would hide it are cleared. May be called before the screen is mounted."""
        self.want.goto = (path, int(line_no))
        if self.is_mounted:
            self._request()

    # -- requests and the worker ----------------------------------------------------------
    def _request(self, **changes) -> None:
        self.want = replace(self.want, **changes)
        self._seq += 1
        self._busy = True
        self._show_status()
        self._work(self._seq)

    @work(thread=True, group="logs")
    def _work(self, seq: int) -> None:
        with self._op_lock:
            if seq != self._seq:
                return  # a newer request follows and will bring the view up to date
            want, data, message, pos, centre = self.want, self.data, "", None, False
            data.build()
            try:
                if (want.filters, want.order) != (data.state.filters, data.state.order):
                    data.apply(want.filters, want.order)
                if want.search != data.searched:
                    data.search(want.search)
            except duckdb.Error as exc:  # a pattern RE2 refuses: drop it
                message = "bad regex (RE2): " + str(exc).splitlines()[0]
                data.apply(replace(want.filters, regex=""), want.order)
                data.search("")
            if want.goto:
                pos, message = self._locate(data, *want.goto)
                message = message or ""
                centre = True
            elif want.keep:
                pos = data.nearest(*want.keep, data.state.order)
            if want.to_hit:
                hit = data.next_hit(pos if pos is not None else -1, want.to_hit > 0)
                pos = hit if hit is not None else pos
                message = message or ("" if hit is not None else "no match")
            self.app.call_from_thread(self._done, seq, pos, centre, message)

    def _locate(self, data: LogData, path: str, line_no: int) -> tuple[int | None, str]:
        input_id = data.input_of(path)
        if input_id is None:
            return None, f"no input {path}"
        if not data.has_line(input_id, line_no):
            return None, f"{data.path_of(input_id)} has no line {line_no}"
        pos = data.position(input_id, line_no)
        if pos is None:  # hidden by the filters: show it unfiltered
            data.apply(Filters(), data.state.order)
            pos = data.position(input_id, line_no)
        return pos, ""

    def _done(self, seq: int, pos: int | None, centre: bool, message: str) -> None:
        if seq != self._seq:
            return
        self._busy = False
        # The store's view is the truth (a goto may have cleared the filters).
        self.want = replace(self.want, filters=self.data.state.filters, search=self.data.searched,
                            goto=None, keep=None, to_hit=0)
        view = self.view
        view.reset()
        if pos is not None:
            view.move_to(pos, centre=centre, later=True)
        elif not self._opened:
            view.move_to(self.data.state.count - 1, later=True)  # opened: at the end, where the run stopped
        self._opened = True
        if message:
            self.notify(message, severity="warning", timeout=4)
        self._show_status()

    # -- actions ----------------------------------------------------------------------------
    def action_ask(self, kind: str) -> None:
        current = {"search": self.want.search, "regex": self.want.filters.regex,
                   "ranks": self.want.filters.describe().split("rank ")[-1].split(" ")[0]
                   if self.want.filters.ranks else "",
                   "nodes": ",".join(self.want.filters.nodes), "goto": ""}[kind]
        self._asking = kind
        self.query_one("#logs-prompt-label", Label).update(plain(self.PROMPTS[kind]))
        box = self.query_one("#logs-prompt-input", Input)
        box.value = current
        box.cursor_position = len(current)
        self.query_one("#logs-prompt").add_class("shown")
        box.focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        kind, value = self._asking, event.value.strip()
        self._close_prompt()
        try:
            self._answer(kind, value)
        except ValueError as exc:
            self.notify(str(exc), severity="error", timeout=5)

    def _answer(self, kind: str, value: str) -> None:
        f = self.want.filters
        if kind == "search":
            python_regex(value)
            self._request(search=value, to_hit=1 if value else 0, keep=self._cursor_key())
        elif kind == "regex":
            python_regex(value)
            self._request(filters=replace(f, regex=value), keep=self._cursor_key())
        elif kind == "ranks":
            self._request(filters=replace(f, ranks=parse_ranks(value)), keep=self._cursor_key())
        elif kind == "nodes":
            self._request(filters=replace(f, nodes=parse_nodes(value)), keep=self._cursor_key())
        elif kind == "goto" and value:
            jump = self._jump_target(value)
            if jump is not None:
                self._jump(*jump)
            else:
                self._request(goto=self._goto_target(value))

    def _jump_target(self, value: str) -> tuple[str, object] | None:
        """``rank 17`` / ``r17``, ``node NAME`` (a glob), or a time (``09:21``, ``2026-07-24 09:21``)."""
        word, _, rest = value.partition(" ")
        if word in ("rank", "r") and rest.strip().isdigit():
            return "rank", int(rest)
        if value[:1] == "r" and value[1:].isdigit():
            return "rank", int(value[1:])
        if word == "node" and rest.strip():
            return "node", rest.strip()
        if re.fullmatch(r"(\d{4}-\d{2}-\d{2}[ T])?\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", value):
            return "time", value
        return None

    def _jump(self, kind: str, value) -> None:
        if self.data is None or not self.data.built:
            raise ValueError("the lines are still being indexed")
        if kind == "time":
            if self.want.order != "time":
                raise ValueError("go to a time in time order: press t first")
            pos, used = self.data.first_at(value)
            what = f"no line at or after {used}"
        else:
            pos, what = self.data.first_where(kind, value), f"no line of {kind} {value} in this view"
        if pos is None:
            raise ValueError(what)
        self.view.move_to(pos, centre=True)

    def _goto_target(self, value: str) -> tuple[str, int]:
        path, _, number = value.rpartition(":")
        if not number.strip().isdigit():
            raise ValueError(f"not a line number: {value!r}")
        if not path:
            row = self._cursor_row()
            if row is None:
                raise ValueError("no current file: give path:line")
            path = row.path
        return path, int(number)

    def _close_prompt(self) -> None:
        self.query_one("#logs-prompt").remove_class("shown")
        self._asking = ""
        self.view.focus()

    def action_escape(self) -> None:
        if self._asking:
            self._close_prompt()
        elif self.want.search:
            self._request(search="", keep=self._cursor_key())

    def action_moment(self, which: str) -> None:
        self._find_moment(which)

    @work(thread=True, group="moments")
    def _find_moment(self, which: str) -> None:
        """Read the run's moments (once per session, off the UI thread), then go there."""
        found = moment_of(self.session.moments(), which)
        self.app.call_from_thread(self._go_to_moment, which, found)

    def _go_to_moment(self, which: str, found: tuple | None) -> None:
        """The first failure's own line (filters that hide it cleared, as for evidence); the
        hang's start as a time: the first line at or after it, in time order."""
        if found is None:
            self.notify(NO_MOMENT[which], timeout=4, markup=False)
            return
        wall, line, _rank, words = found
        try:
            if line is not None:
                self._request(goto=(self.data.path_of(line[0]), line[1]))
            else:
                self._jump("time", f"{wall:%Y-%m-%d %H:%M:%S.%f}")
        except ValueError as exc:
            self.notify(str(exc), severity="error", timeout=5, markup=False)
            return
        self.notify(words, timeout=4, markup=False)

    def action_hit(self, direction: int) -> None:
        if not self.want.search:
            self.notify("no search: press / first", timeout=3)
            return
        pos = self.data.next_hit(self.view.cursor, direction > 0)
        if pos is None:  # no match, or the worker is busy: let it answer
            self._request(to_hit=direction, keep=self._cursor_key())
        else:
            self.view.move_to(pos, centre=True)

    def action_cycle_level(self) -> None:
        level = {DEBUG: 1, 1: WARN, WARN: ERROR, ERROR: DEBUG}[self.want.filters.min_level]
        self._request(filters=replace(self.want.filters, min_level=level), keep=self._cursor_key())

    def action_clear(self) -> None:
        self._request(filters=Filters(), keep=self._cursor_key())

    def action_toggle_order(self) -> None:
        self._request(order="file" if self.want.order == "time" else "time", keep=self._cursor_key())

    # -- the status bar -----------------------------------------------------------------------
    def on_log_view_cursor_moved(self, _: LogView.CursorMoved) -> None:
        self._show_status()

    def _cursor_row(self) -> LogRow | None:
        return self.data.row(self.view.cursor) if self.data and self.data.built else None

    def _cursor_key(self) -> tuple[int, int] | None:
        row = self._cursor_row()
        return (row.input_id, row.line_no) if row else None

    def _show_status(self) -> None:
        if not self.is_mounted or self.data is None:
            return
        state = self.data.state
        muted = "dim"
        first = [(f"{state.count:,} of {state.total:,} lines" if state.filters.active
                  else f"{state.total:,} lines", "bold")]
        if state.filters.active:
            first.append((" · " + state.filters.describe(), ""))
        first.append((f" · by {state.order}", muted))
        if self.want.search and self._busy:
            # the count is the old search's (or the old filters') until the worker is done
            first += [(f" · search /{self.want.search}/ ", ""), ("searching…", "italic")]
        elif self.want.search:
            first.append((f" · search /{self.want.search}/ {state.hits:,} match"
                          + ("" if state.hits == 1 else "es"), ""))
        elif self._busy:
            first.append((" · working…", "italic"))
        row = self._cursor_row()
        second = [("", "")]
        if row is not None:
            who = " · ".join(p for p in (f"rank {row.rank}" if row.rank is not None else "", row.node or "",
                                         f"attempt {row.attempt}" if row.attempt is not None else "",
                                         LEVELS[row.level]) if p)
            second = [(f"{row.path}:{row.line_no}", "bold"), ("  " + who, muted)]
        status = join(*first, ("\n", ""), *second)
        status.no_wrap = True
        status.overflow = "ellipsis"
        self.query_one("#logs-status", Static).update(status)
