"""What the exports share: their error and the store's tables, columns and job id."""

from __future__ import annotations

import duckdb


class ExportError(Exception):
    """Bad usage or nothing to export (exit code 2); the message says why."""


def columns(con: duckdb.DuckDBPyConnection, table: str) -> dict[str, str]:
    rows = con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = ? "
                       "AND table_schema = 'main' ORDER BY ordinal_position", [table]).fetchall()
    return {name: dtype for name, dtype in rows}


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    return [r[0] for r in con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
                                      "ORDER BY table_name").fetchall()]


def job_id_of(con) -> str | None:
    """The job's id from the store: the scheduler's record of the whole job, else Slurm lines."""
    queries = []
    if "job_id" in columns(con, "job"):
        if "step" in columns(con, "job"):
            queries.append("SELECT job_id, count(*) AS n FROM job WHERE job_id IS NOT NULL AND step IS NULL "
                           "GROUP BY job_id ORDER BY n DESC, job_id LIMIT 1")
        queries.append("SELECT job_id, count(*) AS n FROM job WHERE job_id IS NOT NULL GROUP BY job_id "
                       "ORDER BY n DESC, job_id LIMIT 1")
    if "job_id" in columns(con, "slurm"):
        queries.append("SELECT job_id, count(*) AS n FROM slurm WHERE job_id IS NOT NULL GROUP BY job_id "
                       "ORDER BY n DESC, job_id LIMIT 1")
    for sql in queries:
        rows = con.execute(sql).fetchall()
        if rows:
            return str(rows[0][0])
    return None
