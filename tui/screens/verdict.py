"""The Verdict screen (to be built)."""

from __future__ import annotations

from textual.widgets import Static

from tui.screens.base import BaseScreen
from tui.text import plain


class VerdictScreen(BaseScreen):
    TITLE_NAME = "Verdict"
    HELP = "Not built yet."

    def compose_body(self):
        yield Static(plain("Verdict: not built yet"))
