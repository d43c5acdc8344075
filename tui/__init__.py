"""The Textual terminal UI: ``postmortem tui PATH...`` or ``postmortem tui --db FILE``.

Only the ``tui`` command imports this package; the headless commands never import Textual
(``tests/test_layers.py`` holds them to it). Data comes from the store and the report
(``postmortem.tui.session``); each screen is a module in ``tui/screens``; log text reaches the terminal
only through ``postmortem.tui.text`` (never as markup, escape sequences neutralised).
"""
