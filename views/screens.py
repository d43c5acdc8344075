"""The TUI's screens, by mode name: key, footer label and the screen class as "module:Class".

The one registry the app's key bindings and help, and the ``tui`` command's ``--screen``
choices, are built from. The classes are named, not imported, so the command line can offer the
choices without loading Textual; the app imports a screen when it is first shown.
"""

from __future__ import annotations

SCREENS = {
    "verdict": ("1", "Verdict", "postmortem.tui.screens.verdict:VerdictScreen"),
    "timeline": ("2", "Timeline", "postmortem.tui.screens.timeline:TimelineScreen"),
    "transports": ("3", "Transports", "postmortem.tui.screens.transports:TransportsScreen"),
    "environment": ("4", "Env", "postmortem.tui.screens.environment:EnvironmentScreen"),
    "memory": ("5", "Memory", "postmortem.tui.screens.memory:MemoryScreen"),
    "logs": ("6", "Logs", "postmortem.tui.screens.logs:LogsScreen"),
    "sql": ("7", "SQL", "postmortem.tui.screens.sql:SqlScreen"),
}
