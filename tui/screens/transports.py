"""The Transports screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class TransportsScreen(BaseScreen):
    TITLE_NAME = "Transports"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Transports: not built yet"))
