"""What every screen shares: the header, the footer and the session."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Footer, Header

from tui.session import Session


class BaseScreen(Screen):
    """A top-level screen (one per App mode). Subclasses implement ``compose_body``."""

    # The screen's own name in the header ("Timeline"); the App's mode keys are 1-7.
    TITLE_NAME = ""

    @property
    def session(self) -> Session:
        return self.app.session  # type: ignore[attr-defined]

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon="")
        yield from self.compose_body()
        yield Footer(compact=True)

    def compose_body(self) -> ComposeResult:
        yield from ()

    def on_mount(self) -> None:
        self.title = f"postmortem · {self.TITLE_NAME}"
        self.sub_title = self.session.title
