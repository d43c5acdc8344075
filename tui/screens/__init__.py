"""One module per screen. Each screen is a ``BaseScreen`` with a ``Header``, its body and a
``Footer``; it reads ``self.session`` (tui.session.Session) and shows log text only through
``tui.text``."""
