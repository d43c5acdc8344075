"""The Memory screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class MemoryScreen(BaseScreen):
    TITLE_NAME = "Memory"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Memory: not built yet"))
