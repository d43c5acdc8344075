"""What the exports share: their error and the store's tables."""

from __future__ import annotations

import duckdb


class ExportError(Exception):
    """Bad usage or nothing to export (exit code 2); the message says why."""


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                                      "ORDER BY table_name").fetchall()]
