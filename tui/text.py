"""Untrusted text for the terminal. Log lines, paths, variable values and SQL results become
``rich.text.Text`` here: Text is never parsed as markup (a line with ``[red]`` or ``[link=...]``
shows those characters), and control characters, ESC included, become visible ``\\xNN``
escapes (postmortem.views.render.safe), so a crafted line cannot move the cursor, retitle the
terminal or hide itself. Widgets that would parse a ``str`` as markup (Static, Label,
DataTable cells, OptionList prompts) get Text from here, never a raw ``str``."""

from __future__ import annotations

from rich.text import Text

from postmortem.views.render import safe


def plain(value: object, style: str = "") -> Text:
    """Any value as inert terminal text (None as an empty string)."""
    return Text(safe("" if value is None else str(value)), style=style, no_wrap=False)


def cell(value: object, style: str = "", limit: int = 200) -> Text:
    """A one-line table cell: inert, newlines folded, cut at ``limit`` characters."""
    text = safe("" if value is None else str(value).replace("\n", " "))
    if len(text) > limit:
        text = text[:limit - 1] + "…"
    return Text(text, style=style, no_wrap=True, overflow="ellipsis")


def join(*parts: tuple[object, str] | Text) -> Text:
    """Text from (value, style) pairs; every value goes through ``plain``."""
    out = Text()
    for part in parts:
        out.append_text(part if isinstance(part, Text) else plain(part[0], part[1]))
    return out


SEVERITY_STYLE = {"error": "bold red", "warning": "bold dark_orange", "info": "dodger_blue2"}
