"""The Environment screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class EnvironmentScreen(BaseScreen):
    TITLE_NAME = "Environment"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Environment: not built yet"))
