"""What the exports share: their error."""

from __future__ import annotations


class ExportError(Exception):
    """Bad usage or nothing to export (exit code 2); the message says why."""
