"""One module per screen. Each screen is a ``BaseScreen`` with a ``Header``, its body and a
``Footer``; it reads ``self.session`` (postmortem.tui.session.Session) and shows log text only through
``postmortem.tui.text``."""
