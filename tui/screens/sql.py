"""The Sql screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class SqlScreen(BaseScreen):
    TITLE_NAME = "Sql"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Sql: not built yet"))
