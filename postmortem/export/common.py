"""What the exports share: their error and the store's tables."""

from __future__ import annotations

import duckdb

from postmortem.analyzer import store


class ExportError(Exception):
    """Bad usage or nothing to export (exit code 2); the message says why."""


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return store.tables(con)
