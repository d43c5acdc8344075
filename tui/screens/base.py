"""What every screen shares: the header, the mode bar (the seven screens and their keys), the
footer (this screen's keys) and the session."""

from __future__ import annotations

import time

from rich.text import Text
from textual import events, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Input, Label, Static

from postmortem.tui.session import Session


class ModeBar(Static):
    """One line above the footer: ``1 Verdict  2 Timeline ...`` with the current screen marked.
    A click on a name opens that screen. (The footer below lists the current screen's keys.)"""

    DEFAULT_CSS = """
    ModeBar { height: 1; background: $panel; color: $text-muted; }
    """

    def __init__(self, current: str):
        super().__init__()
        self.current = current
        self._spans: list[tuple[int, int, str]] = []

    def render(self) -> Text:
        from postmortem.tui.app import SCREENS

        text, self._spans = Text(no_wrap=True, overflow="crop"), []
        for mode, (key, label, _) in SCREENS.items():
            start = len(text)
            style = "bold reverse" if mode == self.current else ""
            text.append(f" {key}", style=f"bold {style}".strip())
            text.append(f" {label} ", style=style)
            self._spans.append((start, len(text), mode))
        return text

    def on_click(self, event: events.Click) -> None:
        for start, end, mode in self._spans:
            if start <= event.x < end:
                self.app.switch_mode(mode)


class Table(DataTable):
    """A DataTable whose cells are painted at their measured width, and that scrolls where asked
    once it knows its own height.

    Textual (8.2) measures new rows in an idle pass and caches each rendered cell under a key
    that leaves out the column's width. A table of fixed size that is painted between
    ``add_rows`` and that pass (a busy machine, a big result) keeps the cells it drew at the
    header's width, cut to ``…``, until something else invalidates the cache. So after each
    measuring pass the cache is dropped and the table repainted.

    The same pass sets how tall the table's content is, and the screen's layout may still change
    the table's own height after it; a scroll made before either stops short. So
    ``scroll_when_measured`` keeps its target and scrolls again after each measuring pass and
    resize, until the cursor moves or the mouse wheel turns. Without a target, a resize keeps the
    cursor's row in sight."""

    scroll_target: int | None = None  # the line asked for by scroll_when_measured

    def scroll_when_measured(self, y: int) -> None:
        """Scroll to line ``y`` now, and again whenever the table is measured or resized."""
        self.scroll_target = y
        self.call_after_refresh(self._scroll_to_target)

    def clear(self, columns: bool = False):
        self.scroll_target = None   # asked for the rows that were there
        return super().clear(columns)

    def _scroll_to_target(self) -> None:
        if self.scroll_target is not None:
            self.scroll_to(y=self.scroll_target, animate=False, immediate=True)

    def _update_dimensions(self, new_rows) -> None:
        super()._update_dimensions(new_rows)
        self._clear_caches()
        self.refresh()
        if self.scroll_target is not None:
            self.call_after_refresh(self._scroll_to_target)

    # Textual calls the handlers of every class in the MRO: these run beside DataTable's own.
    def _on_resize(self, _) -> None:
        if self.scroll_target is not None:
            self.call_after_refresh(self._scroll_to_target)
        elif self.show_cursor and self.row_count:
            # a smaller terminal keeps the cursor's row in sight (Textual keeps the offset only)
            self.call_after_refresh(self._scroll_cursor_into_view)

    def _on_mouse_scroll_down(self, _) -> None:
        self.scroll_target = None

    _on_mouse_scroll_up = _on_mouse_scroll_down

    def watch_cursor_coordinate(self, old, new) -> None:
        super().watch_cursor_coordinate(old, new)
        if old != new:
            self.scroll_target = None  # the cursor moved: the user reads elsewhere now


class BaseScreen(Screen):
    """A top-level screen (one per App mode). Subclasses implement ``compose_body``.

    vim keys work on every screen beside the arrows: ``j``/``k`` press down/up, ``G`` end and
    ``g g`` home, for whatever has the focus (a table, the log view, the timeline's lanes)."""

    BINDINGS = [
        Binding("j", "vim('down')", "Down", show=False),
        Binding("k", "vim('up')", "Up", show=False),
        Binding("G", "vim('end')", "Last", show=False),
        Binding("g", "vim_g", "g g: first", show=False),
    ]
    _last_g = 0.0

    DEFAULT_CSS = """
    BaseScreen #chrome { dock: bottom; height: 2; }
    BaseScreen #chrome Footer { dock: none; }
    """

    # The screen's own name in the header ("Timeline"); the App's mode keys are 1-7.
    TITLE_NAME = ""

    @property
    def session(self) -> Session:
        return self.app.session  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="")
        yield from self.compose_body()
        with Vertical(id="chrome"):
            yield ModeBar(_mode_of(self))
            yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def action_vim(self, key: str) -> None:
        table = self.focused
        if key in ("home", "end") and isinstance(table, DataTable) and table.row_count:
            # a DataTable's home/end scroll without moving the cursor; vim's gg/G move it
            table.move_cursor(row=0 if key == "home" else table.row_count - 1)
            return
        self.app.simulate_key(key)

    def action_vim_g(self) -> None:
        now = time.monotonic()
        if now - self._last_g < 0.8:   # the second g of "g g"
            self.action_vim("home")
            now = 0.0
        self._last_g = now

    def on_mount(self) -> None:
        # Textual calls every class's on_mount in turn: subclasses must not call super() here.
        self.title = f"postmortem · {self.TITLE_NAME}"
        self.sub_title = self.session.title
        self.call_after_refresh(self.app.screen_painted)  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="load")
    def load_view(self, build, done, failed=None) -> None:
        """``build(run, report)`` in a worker thread, on a Run over its own cursor (one DuckDB
        connection must not serve two threads at once); ``done(view)`` then on the UI thread, or
        ``failed(why)`` when given and the build raised."""
        from postmortem.analyzer.pipeline import Run

        con = self.session.cursor()
        try:
            view = build(Run(con, info=dict(self.session.run.info), db_path=self.session.run.db_path),
                         self.session.report)
        except Exception as exc:  # noqa: BLE001 -- shown on the screen by ``failed``
            if failed is None:
                raise
            self.app.call_from_thread(failed, f"{type(exc).__name__}: {exc}")
            return
        finally:
            con.close()
        self.app.call_from_thread(done, view)


class AskScreen(ModalScreen[str]):
    """A one-line question at the bottom (Enter answers, Escape cancels with "")."""

    BINDINGS = [Binding("escape", "cancel", "Cancel")]
    DEFAULT_CSS = """
    AskScreen { align: center bottom; }
    AskScreen > Horizontal { height: 1; width: 100%; background: $panel; margin-bottom: 2; }
    AskScreen Label { width: auto; padding: 0 1; color: $accent; text-style: bold; }
    AskScreen Input { border: none; height: 1; width: 1fr; padding: 0; }
    """

    def __init__(self, question: str):
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Horizontal():
            yield Label(Text(self.question))
            yield Input(id="ask-input")

    def on_mount(self) -> None:
        self.query_one(Input).focus()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip())

    def action_cancel(self) -> None:
        self.dismiss("")


def _mode_of(screen: Screen) -> str:
    from postmortem.tui.app import SCREENS

    target = f"{type(screen).__module__}:{type(screen).__name__}"
    return next((mode for mode, (_, _, t) in SCREENS.items() if t == target), "")
