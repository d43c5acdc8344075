"""The Logs screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class LogsScreen(BaseScreen):
    TITLE_NAME = "Logs"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Logs: not built yet"))

    def goto(self, path: str, line_no: int) -> None:
        """Show ``path``'s line ``line_no`` (1-based, as in Evidence.line). May be called before
        the screen is mounted (App.show_line switches mode first)."""
