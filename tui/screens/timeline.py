"""The Timeline screen: time left to right, a lane per rank grouped by node, marks for what each
rank logged (``postmortem.views.timeline_data``), culprits pinned at the top and highlighted.

The lanes are a Line-API widget (``TimelineLanes``, a ``ScrollView`` whose ``render_line``
draws one row): only the rows on screen are drawn, and a row costs a bisect per kind and
column boundary, so a key press stays cheap at 1,024 ranks. The store is read once, in a
worker thread with its own cursor. The panel below lists the marks under the cursor's time
column (the selected lane's, or every lane's with ``a``); their text is log text and goes
through ``postmortem.tui.text``.
"""

from __future__ import annotations

from itertools import groupby

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.geometry import Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widgets import Static

from postmortem.views import timeline_data as td
from postmortem.views.log_data import time_target
from postmortem.tui.session import NO_MOMENT, moment_of
from postmortem.tui.screens.base import AskScreen, BaseScreen
from postmortem.tui.text import join, plain

LEGEND_WORD = {"timeout": "timeout", "error": "error", "last": "last", "node": "node", "warning": "warn",
               "init": "init", "collective": "coll", "iteration": "iter", "event": "other",
               "inflight": "in flight"}
PANEL_LIMIT = 200       # marks listed under the cursor (the rest are counted)
MIN_DT = 1e-4           # seconds per column at the deepest zoom


class TimelineLanes(ScrollView, can_focus=False):
    """The lanes: one row per ``timeline_data.Row``; the view is ``t0`` and ``dt`` (seconds per
    column) unless ``fit_mode`` (the whole run), the cursor is a time and a selected row."""

    COMPONENT_CLASSES = {
        *(f"timeline--{k}" for k in td.KINDS),
        "timeline--label", "timeline--node", "timeline--heading", "timeline--culprit",
        "timeline--culprit-row", "timeline--selected", "timeline--cursor", "timeline--rule",
    }
    DEFAULT_CSS = """
    TimelineLanes { height: 1fr; overflow-x: hidden; scrollbar-size-vertical: 1; }
    TimelineLanes > .timeline--timeout { color: $text; background: $error; text-style: bold; }
    TimelineLanes > .timeline--error { color: $text-error; text-style: bold; }
    TimelineLanes > .timeline--last { color: $foreground; text-style: bold; }
    TimelineLanes > .timeline--node { color: $text-secondary; text-style: bold; }
    TimelineLanes > .timeline--warning { color: $text-warning; }
    TimelineLanes > .timeline--init { color: $text-success; }
    TimelineLanes > .timeline--collective { color: $text-primary; }
    TimelineLanes > .timeline--iteration { color: $text-muted; }
    TimelineLanes > .timeline--event { color: $text-muted; }
    TimelineLanes > .timeline--inflight { color: $text-warning; }
    TimelineLanes > .timeline--label { color: $foreground; }
    TimelineLanes > .timeline--heading { color: $text-error; text-style: bold; }
    TimelineLanes > .timeline--culprit { color: $text-error; text-style: bold; }
    TimelineLanes > .timeline--culprit-row { background: $error 20%; }
    TimelineLanes > .timeline--selected { background: $accent 30%; }
    TimelineLanes > .timeline--cursor { background: $primary 45%; }
    TimelineLanes > .timeline--rule { color: $text-muted; }
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.data: td.TimelineData | None = None
        self.rows: list[td.Row] = []
        self._longest_label = 10
        self.collapsed: set[str] = set()
        self.fit_mode = True
        self._t0 = 0.0
        self._dt = 1.0
        self.cursor_t = 0.0
        self.selected = 0
        self._cells: dict[str, list] = {}
        self._cells_key: tuple | None = None
        self._styles: dict[str, Style] = {}
        self._styles_theme: str | None = None

    # --- geometry ----------------------------------------------------------------------------

    @property
    def label_width(self) -> int:
        return max(10, min(self._longest_label + 1, 22 if self.size.width >= 100 else 17))

    @property
    def time_width(self) -> int:
        return max(1, self.size.width - self.label_width - 2)   # the separator and the scrollbar

    @property
    def view(self) -> tuple[float, float]:
        """(t0, dt): the time of the first column and the seconds per column."""
        if self.fit_mode and self.data is not None:
            span = max(self.data.end - self.data.start, 1e-3)
            return self.data.start, span / (self.time_width - 0.5)
        return self._t0, self._dt

    def column_of(self, t: float) -> int:
        t0, dt = self.view
        return int((t - t0) // dt)

    @property
    def cursor_column(self) -> int:
        return self.column_of(self.cursor_t)

    @property
    def cursor_window(self) -> tuple[float, float]:
        t0, dt = self.view
        col = self.cursor_column
        return t0 + col * dt, t0 + (col + 1) * dt

    # --- state changes (each ends in a refresh) ----------------------------------------------

    def set_data(self, data: td.TimelineData) -> None:
        self.data = data
        self._relayout()
        first = next((i for i, r in enumerate(self.rows) if r.kind == "rank" and r.culprit), None)
        if first is None:
            first = next((i for i, r in enumerate(self.rows) if r.culprit and r.lane is not None), None)
        if first is None:
            first = next((i for i, r in enumerate(self.rows) if r.kind == "rank"), 0)
        self.selected = first
        lane = self.rows[first].lane if self.rows else None
        last = lane.last_of("last") if lane is not None else None
        if last is None and lane is not None and lane.times:
            last = lane.times[-1]
        self.cursor_t = last if last is not None else data.end
        self.fit_mode = True
        self._show_selected()
        self.refresh()

    def _relayout(self) -> None:
        key = self.rows[self.selected].lane.key if self.rows and self.rows[self.selected].lane else None
        self.rows = self.data.rows(self.collapsed) if self.data else []
        self._longest_label = max((len(r.label) for r in self.rows), default=10)
        self.virtual_size = Size(max(self.size.width, 1), len(self.rows))
        if key is not None:
            self.selected = next((i for i, r in enumerate(self.rows) if r.lane and r.lane.key == key),
                                 min(self.selected, max(len(self.rows) - 1, 0)))
        self.selected = min(self.selected, max(len(self.rows) - 1, 0))
        self._cells.clear()

    def _set_view(self, t0: float, dt: float) -> None:
        self.fit_mode = False
        self._t0, self._dt = t0, max(dt, MIN_DT)
        self.refresh()

    def fit(self) -> None:
        self.fit_mode = True
        self.refresh()

    def zoom(self, factor: float) -> None:
        """Zoom by ``factor`` (2 = in) keeping the cursor's column where it is."""
        t0, dt = self.view
        offset = (self.cursor_t - t0) / dt
        new_dt = dt / factor
        if self.data is not None:
            new_dt = min(new_dt, max(self.data.end - self.data.start, 1e-3) * 4 / self.time_width)
        self._set_view(self.cursor_t - offset * max(new_dt, MIN_DT), new_dt)

    def pan(self, columns: int) -> None:
        t0, dt = self.view
        self._set_view(t0 + columns * dt, dt)
        # the cursor keeps its screen column
        self.cursor_t += columns * dt

    def move_cursor(self, columns: int) -> None:
        t0, dt = self.view
        col = self.cursor_column + columns
        self.cursor_t = t0 + (col + 0.5) * dt
        self._keep_cursor_visible()
        self.refresh()

    def goto_time(self, t: float) -> None:
        self.cursor_t = t
        self._keep_cursor_visible()
        self.refresh()

    def _keep_cursor_visible(self) -> None:
        col = self.cursor_column
        if not 0 <= col < self.time_width:
            t0, dt = self.view
            self._set_view(self.cursor_t - dt * self.time_width / 2, dt)

    def select(self, delta: int) -> None:
        if self.rows:
            self.selected = max(0, min(len(self.rows) - 1, self.selected + delta))
            self._show_selected()
            self.refresh()

    def select_row(self, index: int) -> None:
        self.selected = index
        self._show_selected()
        self.refresh()

    def _show_selected(self) -> None:
        height = max(self.size.height, 1)
        top = int(self.scroll_offset.y)
        if self.selected < top:
            self.scroll_to(y=self.selected, animate=False, immediate=True)
        elif self.selected >= top + height:
            self.scroll_to(y=self.selected - height + 1, animate=False, immediate=True)

    def toggle_node(self, node: str) -> None:
        self.collapsed ^= {node}
        self._relayout()
        self._show_selected()
        self.refresh()

    def toggle_all(self) -> None:
        nodes = set(self.data.nodes) if self.data else set()
        self.collapsed = set() if self.collapsed >= nodes else nodes
        self._relayout()
        self._show_selected()
        self.refresh()

    def jump(self, direction: int, kinds: tuple[str, ...] | None = None, every_lane: bool = False) -> bool:
        """Move the cursor to the next (1) or previous (-1) mark of the selected lane (or, with
        ``every_lane``, of any lane, selecting it); False when there is none."""
        lo, hi = self.cursor_window
        candidates = [(i, r.lane) for i, r in enumerate(self.rows) if r.lane is not None] if every_lane \
            else [(self.selected, self.rows[self.selected].lane)] if self.rows and self.rows[self.selected].lane else []
        best = None
        for i, lane in candidates:
            t = lane.next_after(hi, kinds) if direction > 0 else lane.prev_before(lo, kinds)
            if t is not None and (best is None or (t < best[0] if direction > 0 else t > best[0])):
                best = (t, i)
        if best is None:
            return False
        if every_lane:
            self.selected = best[1]
            self._show_selected()
        self.goto_time(best[0])
        return True

    # --- what is under the cursor --------------------------------------------------------------

    def marks_under_cursor(self, every_lane: bool) -> list[tuple[td.Row, td.Mark]]:
        lo, hi = self.cursor_window
        rows = self.rows if every_lane else self.rows[self.selected:self.selected + 1]
        out, seen = [], set()
        for row in rows:
            if row.lane is None or row.lane.key in seen:
                continue
            seen.add(row.lane.key)
            out += [(row, m) for m in row.lane.between(lo, hi)]
        out.sort(key=lambda rm: rm[1].t)
        return out

    def visible_rows(self) -> list[td.Row]:
        top = int(self.scroll_offset.y)
        return self.rows[top:top + self.size.height]

    def visible_text(self) -> list[str]:
        return [self.render_line(y).text for y in range(min(self.size.height, len(self.rows)))]

    # --- drawing -----------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        if self._styles_theme != self.app.theme:
            self._styles = {}
            self._styles_theme = self.app.theme
        style = self._styles.get(name)
        if style is None:
            style = self._styles[name] = self.get_component_rich_style(f"timeline--{name}", partial=True)
        return style

    def kind_style(self, kind: str) -> Style:
        return self._style(kind)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._styles = {}

    def _row_cells(self, lane: td.Lane, width: int) -> list:
        t0, dt = self.view
        key = (t0, dt, width)
        if key != self._cells_key:
            self._cells.clear()
            self._cells_key = key
        cells = self._cells.get(lane.key)
        if cells is None:
            cells = self._cells[lane.key] = lane.cells(t0, dt, width)
        return cells

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        index = y + int(self.scroll_offset.y)
        base = self.rich_style
        if index >= len(self.rows):
            return Strip.blank(width, base)
        row = self.rows[index]
        label_w, time_w = self.label_width, self.time_width
        row_bg = Style()
        if row.culprit and row.kind != "heading":
            row_bg = self._style("culprit-row")
        if index == self.selected:
            row_bg = row_bg + self._style("selected")
        label_style = self._style("culprit" if row.culprit else "heading" if row.kind == "heading"
                                  else "node" if row.kind == "node" else "label")
        label = row.label if len(row.label) <= label_w - 1 else row.label[:label_w - 2] + "…"
        segments = [Segment(label.ljust(label_w), base + label_style + row_bg),
                    Segment("│", base + self._style("rule") + row_bg)]
        cursor = self.cursor_column
        if row.kind == "heading" or row.lane is None:
            cells = [None] * time_w
            blank = "─"
        else:
            cells = self._row_cells(row.lane, time_w)
            blank = " "
        # one style per kind for this row (Style additions are the costly part), the cursor's apart
        rule = self._style("rule")
        styles = {k: base + (self._style(k) if k else rule) + row_bg for k in set(cells)}
        for start, end in ((0, min(max(cursor, 0), time_w)), (cursor, cursor + 1), (cursor + 1, time_w)):
            if not (0 <= start < end <= time_w):
                continue
            for kind, group in groupby(cells[start:end]):
                chars = (td.GLYPH[kind] if kind else blank) * len(list(group))
                style = styles[kind] if start != cursor else styles[kind] + self._style("cursor")
                segments.append(Segment(chars, style))
        return Strip(segments).adjust_cell_length(width, base)

    def on_resize(self) -> None:
        self.virtual_size = Size(max(self.size.width, 1), len(self.rows))
        self._cells.clear()
        self.refresh()


class TimelineScreen(BaseScreen):
    TITLE_NAME = "Timeline"
    HELP = """
Time runs left to right; one lane per rank, under its node's lane (kernel, Xid and NIC events;
launcher lines). Culprit ranks are pinned at the top and drawn in the error colour; the cursor
opens on the culprit's last line. Marks: ⊘ timeout, ✖ error, ■ the rank's last timestamped line,
◆ node event, ▲ warning, ▶ init, • collective progress, │ iteration, · other; where several
fall in one column the first of that list is shown. The panel lists the marks under the cursor
(the selected lane, or every lane with `a`). Only rows with a time of their own are drawn.
"""
    BINDINGS = [
        Binding("plus,equals_sign", "zoom(2)", "Zoom", key_display="+"),
        Binding("n", "jump(1)", "Next"),
        Binding("colon", "goto", "Go to", tooltip="Go to a time (09:21), rank 17 or node NAME"),
        Binding("c", "collapse_all", "Collapse"),
        Binding("H", "moment('hang')", "Hang",
                tooltip="Go to the hang's start: the last step or counter advance before the job stood still"),
        Binding("F", "moment('failure')", "1st failure", tooltip="Go to the first timeout or error (its rank's lane)"),
        Binding("minus", "zoom(0.5)", "Zoom out around the cursor", show=False),
        Binding("0", "fit", "Fit the whole run", show=False),
        Binding("left", "cursor(-1)", "Cursor one column left", show=False),
        Binding("right", "cursor(1)", "Cursor one column right", show=False),
        Binding("shift+left,left_square_bracket", "pan(-1)", "Pan left (a quarter of the width)", show=False),
        Binding("shift+right,right_square_bracket", "pan(1)", "Pan right (a quarter of the width)", show=False),
        Binding("up", "select(-1)", "Previous lane", show=False),
        Binding("down", "select(1)", "Next lane", show=False),
        Binding("pageup", "page(-1)", "Lanes: page up", show=False),
        Binding("pagedown", "page(1)", "Lanes: page down", show=False),
        Binding("home", "edge(-1)", "First lane", show=False),
        Binding("end", "edge(1)", "Last lane", show=False),
        Binding("p", "jump(-1)", "Previous mark on the lane", show=False),
        Binding("e", "alarm(1)", "Next error or timeout (any lane)", show=False),
        Binding("E", "alarm(-1)", "Previous error or timeout (any lane)", show=False),
        Binding("enter", "enter", "Node lane: collapse/expand it; rank lane: open the mark in Logs", show=False),
        Binding("o", "open_log", "Open the mark under the cursor in Logs", show=False),
        Binding("a", "panel_all", "Panel: the selected lane or every lane", show=False),
    ]
    DEFAULT_CSS = """
    TimelineScreen #tl-legend { height: 1; padding: 0 1; }
    TimelineScreen #tl-ruler { height: 2; }
    TimelineScreen #tl-panel-box { height: 7; border-top: solid $primary 50%; }
    TimelineScreen #tl-panel { padding: 0 1; text-wrap: nowrap; text-overflow: ellipsis; }
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.panel_every_lane = False
        self.loaded = False
        self.moments = None    # postmortem.views.timeline.Moments, read with the lanes
        self._legend_theme: str | None = None

    @property
    def lanes(self) -> TimelineLanes:
        return self.query_one(TimelineLanes)

    def compose_body(self) -> ComposeResult:
        with Vertical():
            yield Static(plain(""), id="tl-legend")
            yield Static(plain(""), id="tl-ruler")
            yield TimelineLanes(id="tl-lanes")
            with VerticalScroll(id="tl-panel-box", can_focus=False):
                yield Static(plain("reading the timeline…"), id="tl-panel")

    def on_mount(self) -> None:
        self.watch(self.app, "theme", lambda _: self.call_after_refresh(self._refresh_aux), init=False)
        culprits = (self.session.culprit_ranks, self.session.culprit_nodes)
        self.load_view(lambda run, _report: (td.load(run.con, *culprits), self.session.moments()), self._loaded)

    def _loaded(self, loaded: tuple) -> None:
        data, self.moments = loaded
        self.lanes.set_data(data)
        self.loaded = True
        self.call_after_refresh(self._refresh_aux)

    def on_resize(self) -> None:
        self.call_after_refresh(self._refresh_aux)

    # --- actions ---------------------------------------------------------------------------

    def _after(self) -> None:
        self._refresh_aux()

    def action_goto(self) -> None:
        if self.loaded:
            self.app.push_screen(AskScreen("Go to (09:21, rank 17, node NAME)"), self._goto)

    def _goto(self, answer: str | None) -> None:
        """A time moves the cursor there; ``rank N`` / ``node NAME`` select that lane."""
        if not answer:
            return
        lanes, data = self.lanes, self.lanes.data
        word, _, rest = answer.partition(" ")
        rank = int(rest) if word in ("rank", "r") and rest.strip().isdigit() else \
            int(answer[1:]) if answer[:1] == "r" and answer[1:].isdigit() else None
        if rank is not None or word == "node":
            want = ("rank", rank) if rank is not None else ("node", rest.strip())
            index = next((i for i, r in enumerate(lanes.rows) if r.lane is not None and
                          (r.kind, r.rank if want[0] == "rank" else r.node) == want), None)
            if index is None:
                self.notify(f"no lane for {answer} (collapsed node? press c)", severity="warning", timeout=4)
                return
            lanes.select_row(index)
        else:
            try:
                at = time_target(answer, data.wall(data.start), data.wall(data.end))
            except ValueError as exc:
                self.notify(str(exc), severity="error", timeout=5)
                return
            lanes.goto_time((at - data.wall(0)).total_seconds())
        self._after()

    def action_moment(self, which: str) -> None:
        """The hang's start (cursor there, lane kept) or the first failure (cursor there, its
        rank's lane selected); a notification says which, or that the run has none."""
        if not self.loaded:
            return
        lanes, data = self.lanes, self.lanes.data
        found = moment_of(self.moments, which)
        if found is None:
            self.notify(NO_MOMENT[which], timeout=4, markup=False)
            return
        wall, line, rank, words = found
        lanes.goto_time(data.seconds(wall, line, rank))
        index = next((i for i, r in enumerate(lanes.rows) if r.kind == "rank" and r.rank == rank), None) \
            if rank is not None else None
        if index is not None:
            lanes.select_row(index)
        self.notify(words, timeout=4, markup=False)   # a node's name is not markup
        self._after()

    def action_zoom(self, factor: float) -> None:
        self.lanes.zoom(float(factor))
        self._after()

    def action_fit(self) -> None:
        self.lanes.fit()
        self._after()

    def action_cursor(self, columns: int) -> None:
        self.lanes.move_cursor(int(columns))
        self._after()

    def action_pan(self, direction: int) -> None:
        self.lanes.pan(int(direction) * max(1, self.lanes.time_width // 4))
        self._after()

    def action_select(self, delta: int) -> None:
        self.lanes.select(int(delta))
        self._after()

    def action_page(self, direction: int) -> None:
        self.lanes.select(int(direction) * max(1, self.lanes.size.height - 1))
        self._after()

    def action_edge(self, direction: int) -> None:
        self.lanes.select(len(self.lanes.rows) * int(direction))
        self._after()

    def action_jump(self, direction: int) -> None:
        if not self.lanes.jump(int(direction)):
            self.notify("no further mark on this lane", timeout=2)
        self._after()

    def action_alarm(self, direction: int) -> None:
        if not self.lanes.jump(int(direction), td.ALARM_KINDS, every_lane=True):
            self.notify("no further error or timeout", timeout=2)
        self._after()

    def action_collapse_all(self) -> None:
        self.lanes.toggle_all()
        self._after()

    def action_enter(self) -> None:
        lanes = self.lanes
        if not lanes.rows:
            return
        row = lanes.rows[lanes.selected]
        if row.kind == "node" and row.node is not None:
            lanes.toggle_node(row.node)
            self._after()
        else:
            self.action_open_log()

    def action_open_log(self) -> None:
        marks = self.lanes.marks_under_cursor(self.panel_every_lane)
        data = self.lanes.data
        for _, mark in marks:
            path = data.paths.get(mark.input_id) if data and mark.input_id is not None else None
            if path and mark.line_no:
                self.app.show_line(path, int(mark.line_no))  # type: ignore[attr-defined]
                return
        self.notify("no log line under the cursor", timeout=2)

    def action_panel_all(self) -> None:
        self.panel_every_lane = not self.panel_every_lane
        self._after()

    # --- legend, ruler and panel -----------------------------------------------------------

    def _refresh_aux(self) -> None:
        if not self.is_mounted:
            return
        lanes = self.lanes
        if self._legend_theme != self.app.theme:     # the legend's colours follow the theme
            self._legend_theme = self.app.theme
            self.query_one("#tl-legend", Static).update(self.legend_text())
        if lanes.data is None:
            return
        self.query_one("#tl-ruler", Static).update(self.ruler_text())
        self.query_one("#tl-panel", Static).update(self.panel_text())

    def legend_text(self) -> Text:
        lanes = self.lanes
        parts: list = []
        for kind in td.KINDS:
            parts += [(td.GLYPH[kind], str(lanes.kind_style(kind))), (LEGEND_WORD[kind] + " ", "")]
        parts.append(("★culprit", str(lanes._style("culprit"))))
        return join(*parts)

    def ruler_text(self) -> Text:
        lanes = self.lanes
        data = lanes.data
        t0, dt = lanes.view
        width, label_w = lanes.time_width, lanes.label_width
        labels, ticks = td.ruler(data, t0, dt, width)
        marks = [" "] * width
        for col in ticks:
            marks[col] = "╵"
        cursor = lanes.cursor_column
        fine = dt < 1
        head = f"{td.duration_text(dt)}/col"
        top = join((head[:label_w].ljust(label_w) + " ", "dim"), (labels, "bold"))
        bottom = Text()
        bottom.append_text(plain(td.clock_text(data, lanes.cursor_t, fine)[:label_w].ljust(label_w) + " ",
                                 "bold"))
        if 0 <= cursor < width:
            bottom.append_text(join(("".join(marks[:cursor]), "dim"), ("▼", "bold reverse"),
                                    ("".join(marks[cursor + 1:]), "dim")))
        else:
            bottom.append_text(plain("".join(marks), "dim"))
        return Text("\n").join([top, bottom])

    def panel_text(self) -> Text:
        lanes = self.lanes
        data = lanes.data
        lo, hi = lanes.cursor_window
        fine = hi - lo < 60
        row = lanes.rows[lanes.selected] if lanes.rows else None
        where = "every lane" if self.panel_every_lane else (row.label.strip(" ★▾▸") if row else "")
        if row is not None and row.kind == "rank" and row.node and not self.panel_every_lane:
            where += f" on {row.node}"
        marks = lanes.marks_under_cursor(self.panel_every_lane)
        head = join((f"{td.clock_text(data, lo, fine)} – {td.clock_text(data, hi, fine)}", "bold"),
                    (f" · {where} · {len(marks)} mark(s)", ""),
                    ("  (a: " + ("selected lane" if self.panel_every_lane else "every lane") + ")", "dim"))
        lines = [head]
        for row_, mark in marks[:PANEL_LIMIT]:
            who = ""
            if self.panel_every_lane or row_.kind != "rank":
                who = f"rank {mark.rank} " if mark.rank is not None else f"{mark.node} " if mark.node else "job "
            src = data.paths.get(mark.input_id) if mark.input_id is not None else None
            lines.append(join((td.clock_text(data, mark.t, True) + " ", "dim"),
                              (td.GLYPH[mark.kind] + " ", str(lanes.kind_style(mark.kind))),
                              (who, "bold"), (mark.text.replace("\n", " "), ""),
                              (f"  {src}:{mark.line_no}" if src and mark.line_no else "", "dim")))
        if len(marks) > PANEL_LIMIT:
            lines.append(plain(f"… {len(marks) - PANEL_LIMIT} more: zoom in (+) to see fewer", "dim"))
        if not marks:
            lines.append(plain("nothing under the cursor: n/p jump to the next/previous mark, e/E to errors", "dim"))
        lines += [plain(note, "dim") for note in data.notes]
        text = Text("\n").join(lines)
        text.no_wrap, text.overflow = True, "ellipsis"     # one line per mark; o/Enter opens the line
        return text

