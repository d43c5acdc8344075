"""The application: one mode (screen) per view, switched by the keys 1-7.

``PostmortemApp(session=...)`` shows a loaded session at once; ``PostmortemApp(paths=[...])``
first shows a loading screen with the ingest's progress and runs the ingest and the rules in a
worker thread. ``show_line`` is how one screen asks for a log line in the Logs screen (Enter
on a finding's evidence).
"""

from __future__ import annotations

import time
from pathlib import Path

from textual import work
from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Footer, Header, Markdown, Static

from postmortem.views.screens import SCREENS
from postmortem.tui.session import Session, analyze_paths
from postmortem.tui.text import plain

SPINNER = "⠋⠙⠹⠸⠼⠴⠦⠧⠇⠏"


class LoadCancelled(Exception):
    """Raised in the loading thread at its next progress step once the user quit."""


def screen_class(target: str) -> type:
    import importlib

    module, name = target.split(":")
    return getattr(importlib.import_module(module), name)


def _screen_factory(target: str):
    return lambda: screen_class(target)()


def help_markdown(key_display=lambda key: key, first: str | None = None) -> str:
    """The help screen: the current screen's keys first (``first``, a mode name), then
    tui/help.md, then every other screen's ``HELP`` and keys, read from the screen classes
    themselves so the help cannot drift from the bindings."""
    order = sorted(SCREENS, key=lambda name: name != first)
    out = []
    for name in order:
        key, label, target = SCREENS[name]
        cls = screen_class(target)
        if name == order[0] and first is not None:
            out.append(f"## This screen: {key} · {label}")
        else:
            if name == order[0] or (first is not None and name == order[1]):
                out += [(Path(__file__).with_name("help.md")).read_text(encoding="utf-8").rstrip(), ""]
            out.append(f"## {key} · {label}")
        out += ["", getattr(cls, "HELP", "").strip(), ""]
        rows = [b if isinstance(b, Binding) else Binding(*b) for b in cls.__dict__.get("BINDINGS", [])]
        if rows:
            out += ["| key | does |", "|---|---|"]
            out += [f"| `{key_display(b.key)}` | {b.tooltip or b.description or b.action} |" for b in rows]
            out.append("")
    return "\n".join(out) + "\n"


class HelpScreen(ModalScreen):
    """Every key of every screen, the current screen's first; it scrolls with the arrows, page
    keys, j/k, g/G (home/end) and the mouse wheel."""

    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "Close"),
                Binding("j", "scroll('down')", "Down", show=False),
                Binding("k", "scroll('up')", "Up", show=False),
                Binding("g", "scroll('home')", "Top", show=False),
                Binding("G", "scroll('end')", "Bottom", show=False)]
    DEFAULT_CSS = """
    HelpScreen { align: center middle; }
    HelpScreen > VerticalScroll { width: 90%; max-width: 100; height: 90%; border: round $accent;
                                  background: $surface; padding: 0 1; }
    """

    def __init__(self, current: str | None = None):
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with VerticalScroll(id="help-scroll"):
            yield Markdown(help_markdown(lambda key: ", ".join(self.app.get_key_display(Binding(k, ""))
                                                               for k in key.split(",")), first=self.current))

    def on_mount(self) -> None:
        self.query_one("#help-scroll").focus()

    def action_scroll(self, where: str) -> None:
        box = self.query_one("#help-scroll", VerticalScroll)
        {"down": box.scroll_down, "up": box.scroll_up, "home": box.scroll_home, "end": box.scroll_end}[where](
            animate=False)


class PostmortemApp(App):
    """Browse a failed run: verdict, timeline, transports, environment, memory, logs, SQL."""

    TITLE = "postmortem"
    CSS_PATH = "app.tcss"
    MODES = {name: _screen_factory(target) for name, (_, _, target) in SCREENS.items()}
    BINDINGS = [
        # The screens are listed by the mode bar above the footer (postmortem.tui.screens.base.ModeBar);
        # the footer itself keeps the current screen's keys.
        *[Binding(key, f"show('{name}')", label, show=False) for name, (key, label, _) in SCREENS.items()],
        Binding("question_mark", "help", "Help"),
        Binding("ctrl+t", "toggle_theme", "Light/dark", show=False),
        Binding("q", "quit", "Quit"),
        # What users of k9s and lnav press; it also cancels a load (the parse stops at its next step).
        Binding("ctrl+c", "quit", "Quit", show=False, priority=True),
    ]

    def __init__(self, session: Session | None = None, paths: list[str] | None = None,
                 theme: str | None = None, start: str = "verdict", allow_file_access: bool = False,
                 follow_symlinks: bool = False):
        super().__init__()
        self.session = session
        self.paths = paths or []
        self.allow_file_access = allow_file_access
        self.follow_symlinks = follow_symlinks
        self.start = start
        self.failure: str | None = None  # why loading failed (the CLI prints it after exit)
        self.cancelled = False           # quit while loading: the load stops at its next progress step
        self._phase = "starting"
        self._load_started = 0.0
        if theme:
            self.theme = theme

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="")
        with Vertical(id="loading"):
            yield Static(plain("Reading " + ", ".join(self.paths) if self.paths else ""), id="loading-what")
            yield Static(plain(""), id="loading-progress")
            yield Static(plain("q or ctrl+c to cancel"), id="loading-keys")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        if self.session is not None:
            self.switch_mode(self.start)
        else:
            self._load_started = time.monotonic()
            self._ticker = self.set_interval(0.1, self._tick)
            self._tick()
            self._load()

    @work(thread=True, exclusive=True)
    def _load(self) -> None:
        try:
            # the cache entry is written once the first screen is up (screen_painted), not beside
            # the rules: on two cores that copy delayed the verdict by about a second
            session = analyze_paths(self.paths, progress=self._progress_from_thread,
                                    allow_file_access=self.allow_file_access, follow_symlinks=self.follow_symlinks,
                                    cache_later=True)
        except LoadCancelled:
            return
        except Exception as exc:  # noqa: BLE001 -- shown to the user, the app then exits with it
            from postmortem.views.render import safe

            self.failure = safe(" ".join(f"{type(exc).__name__}: {exc}".split()))   # one line, no traceback
            self._to_ui(self.exit, None, 2)
            return
        self._to_ui(self._loaded, session)

    def _to_ui(self, callback, *args) -> None:
        """Hand ``callback`` to the UI thread, unless the app has quit meanwhile."""
        if self.cancelled:
            return
        try:
            self.call_from_thread(callback, *args)
        except RuntimeError:  # the app is no longer running (quit while loading)
            pass

    def _progress_from_thread(self, line: str) -> None:
        if self.cancelled:
            raise LoadCancelled
        self._phase = line.removeprefix("postmortem: ")

    def _tick(self) -> None:
        """The loading line: a spinner, the phase and the time spent, redrawn ten times a second."""
        if self.session is not None:
            self._ticker.stop()
            return
        elapsed = time.monotonic() - self._load_started
        frame = SPINNER[int(elapsed * 10) % len(SPINNER)]
        self.query_one("#loading-progress", Static).update(plain(f"{frame} {self._phase} · {elapsed:.1f} s"))

    def _loaded(self, session: Session) -> None:
        self.session = session
        self.switch_mode(self.start)

    def screen_painted(self) -> None:
        """A screen is up (``BaseScreen.on_mount``, after its first refresh): the cache entry of a
        run just analysed can be written now without slowing the first screen down."""
        if self.session is not None:
            self.session.run.start_cache()

    def finish_cache(self, say=None) -> None:
        """Wait for the cache entry started after the first screen (the CLI, once the app has
        exited and the terminal is back); ``say(line)`` first, when there is still a wait."""
        if self.session is None:
            return
        pending = self.session.run.pending_cache
        if say is not None and pending is not None and pending.is_alive():
            say("postmortem: saving this analysis for the next open ...")
        self.session.run.cache_written()

    async def action_quit(self) -> None:
        self.cancelled = self.session is None
        self.exit()

    def check_action(self, action: str, parameters: tuple) -> bool | None:
        if action == "show" and self.session is None:
            return False  # nothing to show while the run is still loading
        return True

    def action_show(self, mode: str) -> None:
        self.switch_mode(mode)

    def action_help(self) -> None:
        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen(self.current_mode if self.session is not None else None))

    def action_toggle_theme(self) -> None:
        self.theme = "textual-light" if self.theme == "textual-dark" else "textual-dark"

    def show_line(self, path: str, line_no: int) -> None:
        """Open the Logs screen at ``path``'s line ``line_no`` (an evidence line)."""
        self.switch_mode("logs")
        self.screen.goto(path, line_no)  # type: ignore[attr-defined]
