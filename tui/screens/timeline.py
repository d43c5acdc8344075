"""The Timeline screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class TimelineScreen(BaseScreen):
    TITLE_NAME = "Timeline"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Timeline: not built yet"))
