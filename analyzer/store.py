"""The DuckDB store: one database per analysed run, a file users can open with their own tools.

How raw lines are kept: ``lines`` has one row per physical line of every input with its
byte ``offset`` and ``length`` in the (decompressed) input, the attribution (rank, node,
pid, attempt and their sources), the launcher prefix fields and the parser that understood
it. The line text is stored for every line except NCCL ``INFO`` lines, which are the bulk
of large logs (COLL traces reach millions of lines) and are already structured in the
``nccl_*`` tables; ``line_text`` reads any line back from its input by offset. So every
line stays available as evidence without copying gigabytes into the database.

Table columns are documented in ``docs/schema.md`` (generated from a sample database by
``python -m bench.make_docs``).
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import duckdb
import polars as pl

from postmortem.analyzer.discover import COMPRESSED

# Tables every store has, even when a run produced no rows for them.
REQUIRED = {
    "events": {"input_id": pl.UInt32, "line_no": pl.UInt32, "kind": pl.String, "message": pl.String},
    "collectives": {"input_id": pl.UInt32, "line_no": pl.UInt32, "seq": pl.Int64, "op": pl.String},
    "progress": {"input_id": pl.UInt32, "line_no": pl.UInt32, "last_enqueued": pl.Int64,
                 "last_completed": pl.Int64},
    "nccl_comms": {"input_id": pl.UInt32, "line_no": pl.UInt32, "rank": pl.Int64, "nranks": pl.Int64},
    "iterations": {"input_id": pl.UInt32, "line_no": pl.UInt32, "iteration": pl.Int64},
    "stacks": {"input_id": pl.UInt32, "line_no": pl.UInt32, "function": pl.String},
    "exits": {"input_id": pl.UInt32, "line_no": pl.UInt32, "rank": pl.Int64, "exitcode": pl.Int64},
    "memory": {"input_id": pl.UInt32, "line_no": pl.UInt32},
    "settings": {"input_id": pl.UInt32, "line_no": pl.UInt32, "key": pl.String, "value": pl.String},
    "env": {"input_id": pl.UInt32, "line_no": pl.UInt32, "key": pl.String, "value": pl.String},
    # issue 5: node and scheduler evidence (postmortem.rules query them on every run)
    "node_events": {"input_id": pl.UInt32, "line_no": pl.UInt32, "node": pl.String, "kind": pl.String,
                    "code": pl.String, "pci": pl.String, "ts_utc": pl.Datetime("us"), "message": pl.String},
    "job": {"input_id": pl.UInt32, "line_no": pl.UInt32, "job_id": pl.String, "state": pl.String,
            "reason": pl.String, "nodelist": pl.String},
    "job_nodes": {"input_id": pl.UInt32, "line_no": pl.UInt32, "job_id": pl.String, "node": pl.String,
                  "has_logs": pl.Boolean},
}
# Intermediate frames that are not worth a table (the NCCL parser's distinct message shapes
# feed nccl_fingerprints).
INTERNAL = {"nccl_shapes"}


def tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The store's tables as its users see them, sorted: tables and views, without the rows
    some views are made of (names starting with ``_``: ``postmortem.analyzer.bulk``)."""
    return [r[0] for r in con.execute(
        "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main' "
        "AND table_catalog = current_database() AND NOT starts_with(table_name, '_') ORDER BY table_name").fetchall()]


# Runs at least this large keep their tables as Parquet files, views of a capped store
# (``write_files``), where a small run's tables are in memory.
SPILL_BYTES = 64 * 2**20
# What DuckDB itself may hold in memory for a store on disk (it pages the rest out).
MEMORY_LIMIT = os.environ.get("POSTMORTEM_DB_MEMORY")   # else analyzer.budget.db_memory()


def connect(db_path: str | Path | None, capped: bool = False) -> duckdb.DuckDBPyConnection:
    """A new store: ``db_path`` (replaced if it exists), else in memory. DuckDB's own temporary
    files go to a private folder, never to the current directory (which may be the job folder).
    ``capped``: an in-memory store with the memory cap of one on disk (``file_config``), for one
    whose tables are views over Parquet files (``write_files``, a COLL trace's bulk, a cache hit)
    that a query may read at length."""
    if db_path is None:
        return duckdb.connect(config=file_config()) if capped else duckdb.connect()
    path = Path(db_path)
    if path.exists():
        path.unlink()  # a store describes one analysis; re-ingesting replaces it
    wal = path.with_name(path.name + ".wal")
    if wal.exists():
        wal.unlink()
    return duckdb.connect(str(path), config=file_config())


def file_config() -> dict:
    """DuckDB settings of a store on disk: a memory cap, temporary files in a private folder."""
    from postmortem.analyzer import budget

    return {"memory_limit": MEMORY_LIMIT or budget.db_memory(), "temp_directory": str(private_dir() / "duckdb-tmp")}


def lock_down(con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
    """No file system from SQL any more: ``COPY ... TO``, ``EXPORT DATABASE``, ``read_text``,
    ``read_csv``, ``glob``, ``ATTACH``, ``INSTALL`` and ``LOAD`` are refused, and the setting is
    locked so that a query cannot turn it back on (``postmortem query`` and the TUI's SQL screen,
    where the SQL is the user's; ``--allow-file-access`` leaves it). The store's own file and its
    temporary files are DuckDB's, not the query's, and keep working. Idempotent: DuckDB shares one
    database between the connections a process opens to the same file."""
    access, locked = con.execute("SELECT current_setting('enable_external_access'), "
                                 "current_setting('lock_configuration')").fetchall()[0]
    if access:
        con.execute("SET enable_external_access = false")
    if not locked:
        con.execute("SET lock_configuration = true")
    return con


def sql_path(path: Path | str) -> str:
    """``path`` for a single-quoted SQL string literal."""
    return str(path).replace("'", "''")


def private_dir() -> Path:
    """A temporary folder of this process's own, removed at exit."""
    global _PRIVATE
    if _PRIVATE is None or not _PRIVATE.is_dir():
        _PRIVATE = Path(tempfile.mkdtemp(prefix="postmortem-"))
        atexit.register(shutil.rmtree, _PRIVATE, True)
    return _PRIVATE


_PRIVATE: Path | None = None


def remove_private_dir() -> None:
    """The private folder now (a signal ends the run; atexit would run too late or not at all)."""
    global _PRIVATE
    if _PRIVATE is not None:
        shutil.rmtree(_PRIVATE, ignore_errors=True)
        _PRIVATE = None
    _COPIES.clear()


# The columns of the store's tables and views, with their types (``main``: the only schema it
# writes; DuckDB's own system views are left out, whose first listing in a database costs 15-20 ms).
STORE_COLUMNS = ("SELECT table_name, column_name, data_type FROM duckdb_columns() "
                 "WHERE database_name = current_database() AND schema_name = 'main'")


def columns_by_table(con: duckdb.DuckDBPyConnection) -> dict[str, list[tuple[str, str]]]:
    """Every table's (column, DuckDB type) pairs in their order, in one query."""
    out: dict[str, list[tuple[str, str]]] = {}
    for table, column, data_type in con.execute(STORE_COLUMNS + " ORDER BY table_name, column_index").fetchall():
        out.setdefault(table, []).append((column, data_type))
    return out


# The Polars dtype a query of the store (``Run.frame``: DuckDB's Arrow stream) gives for each
# DuckDB type its tables hold. A type not listed here may read back otherwise (a time zone, an
# enum, a struct): ``read_back_unchanged`` says no for it.
_READ_BACK = {"BIGINT": pl.Int64, "INTEGER": pl.Int32, "UBIGINT": pl.UInt64, "UINTEGER": pl.UInt32,
              "DOUBLE": pl.Float64, "BOOLEAN": pl.Boolean, "VARCHAR": pl.String, "TIMESTAMP": pl.Datetime("us"),
              "TIMESTAMP_NS": pl.Datetime("ns"), "VARCHAR[]": pl.List(pl.String), "BIGINT[]": pl.List(pl.Int64)}


def read_back_unchanged(con: duckdb.DuckDBPyConnection, frames: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Those of ``frames`` (just written to the store under their names) that a ``SELECT *`` of
    their table would give back as they are: the same columns in the same order, of the same
    dtypes (the rows are the frame's, in its order: DuckDB keeps the insertion order)."""
    stored = columns_by_table(con)
    return {name: frame for name, frame in frames.items()
            if [(c, _READ_BACK.get(t)) for c, t in stored.get(name, [])] == list(frame.schema.items())}


def write_table(con: duckdb.DuckDBPyConnection, name: str, frame: pl.DataFrame) -> None:
    # Polars' own string layout (Arrow string views, which DuckDB reads): the default converts
    # every string column to large_string first, holding the GIL (the 1,024-rank run's tables:
    # 130-190 ms, against 11 ms). DuckDB finds the local variable by its name (a replacement scan: no
    # table of the store is called so), 0.8 ms a table less than registering it and taking it
    # back; a store locked down (``lock_down``) refuses that, and takes the frame registered.
    _postmortem_incoming = frame.to_arrow(compat_level=pl.CompatLevel.newest())
    sql = f'CREATE OR REPLACE TABLE "{name}" AS SELECT * FROM _postmortem_incoming'
    try:
        con.execute(sql)
    except duckdb.CatalogException:
        con.register("_postmortem_incoming", _postmortem_incoming)
        try:
            con.execute(sql)
        finally:
            con.unregister("_postmortem_incoming")


# Tables written at once, each through its own cursor (a connection to the same store): one
# CREATE TABLE AS keeps a single core busy for most of them. Two writers take the 1,024-rank
# run's 45 tables from 1.3 to 0.9 s (a store on disk) and 0.57 to 0.36 s (in memory).
WRITERS = 2


def _to_write(tables: dict[str, pl.DataFrame]) -> list[tuple[str, pl.DataFrame]]:
    """Every table but ``INTERNAL`` ones, and an empty one for each ``REQUIRED`` table missing,
    the largest first."""
    todo = [(name, frame) for name, frame in tables.items() if name not in INTERNAL]
    todo += [(name, pl.DataFrame(schema=schema)) for name, schema in REQUIRED.items() if name not in tables]
    todo.sort(key=lambda item: -item[1].height)    # the largest first: the writers end together
    return todo


def write_all(con: duckdb.DuckDBPyConnection, tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    """Every table but ``INTERNAL`` ones, and an empty one for each ``REQUIRED`` table missing;
    returns what it wrote."""
    todo = _to_write(tables)

    def write(item: tuple[str, pl.DataFrame]) -> None:
        cursor = con.cursor()
        try:
            write_table(cursor, *item)
        finally:
            cursor.close()

    with ThreadPoolExecutor(WRITERS) as pool:
        list(pool.map(write, todo))
    return dict(todo)


def write_files(con: duckdb.DuckDBPyConnection, tables: dict[str, pl.DataFrame],
                folder: Path) -> tuple[dict[str, pl.DataFrame], dict[str, Path]]:
    """``write_all`` for a large run's store without a file of its own: each table a Parquet file
    in ``folder`` (a new private one) and a view over it in ``con``, which casts each column to
    the type ``write_table`` gives it (an empty table of the frame's columns says which). Polars
    writes the 10,000-rank run's tables in 1.1 s, where DuckDB wrote them into its file in
    3.3-3.5 s (about 40 ns a cell, whatever the content). The folder is one DuckDB may still
    read after ``lock_down`` (``allow``). Returns what it wrote and each table's file."""
    todo = _to_write(tables)
    folder.mkdir(mode=0o700)
    files = {name: folder / f"{n}.parquet" for n, (name, _) in enumerate(todo)}
    for name, frame in todo:
        frame.write_parquet(files[name], compression="zstd")
        write_table(con, name, frame.clear())
    types = columns_by_table(con)
    allow(con, [folder])
    for name, _ in todo:
        con.execute(f'DROP TABLE "{name}"')
        con.execute(over_parquet(name, types[name], files[name], "VIEW"))
    return dict(todo), files


def allow(con: duckdb.DuckDBPyConnection, folders: list[Path | str]) -> None:
    """The folders whose files the store's views read, the only ones SQL may still read after
    ``lock_down`` (DuckDB's ``allowed_directories``, which refuses ``../`` out of them)."""
    listed = ", ".join(f"'{sql_path(Path(folder))}/'" for folder in folders)
    con.execute(f"SET allowed_directories = [{listed}]")


def over_parquet(name: str, columns: list[tuple[str, str]], paths: Path | list[Path], kind: str) -> str:
    """``CREATE VIEW|TABLE name AS SELECT CAST(c AS type) AS c, ... FROM read_parquet(paths)``: a
    table of the store read from Parquet files of its frame or rows, each column of its store
    type. The types are the store's own (``columns_by_table``) or checked by the caller."""
    cast = ", ".join(f"CAST({quoted(column)} AS {dtype}) AS {quoted(column)}" for column, dtype in columns)
    listed = ", ".join(f"'{sql_path(path)}'" for path in (paths if isinstance(paths, list) else [paths]))
    return f"CREATE {kind} {quoted(name)} AS SELECT {cast} FROM read_parquet([{listed}])"


def quoted(name: str) -> str:
    """``name`` as an SQL identifier."""
    return '"' + name.replace('"', '""') + '"'


def line_text(abs_path: str, offset: int, length: int, cache: dict | None = None) -> str:
    """Read one line back from an input by its byte offset. Compressed inputs, UTF-16 text and
    archive members are read from a plain copy made once per process in the private folder
    (``readable``), a block at a time: memory does not grow with the input. ``cache`` is kept
    for callers that pass one (it holds the copies' paths)."""
    if cache is not None and abs_path in cache:
        path = cache[abs_path]
    else:
        path = readable(abs_path)
        if cache is not None:
            cache[abs_path] = path
    with open(path, "rb") as handle:
        handle.seek(offset)
        return handle.read(max(0, min(length, 1 << 24))).decode("utf-8", "backslashreplace")


_COPIES: dict[str, Path] = {}


def readable(abs_path: str) -> Path:
    """A plain file holding the bytes ``inputs.abs_path`` refers to by offset: the file itself,
    or (compressed, UTF-16, an archive member) a decoded copy in ``private_dir``."""
    if abs_path in _COPIES:
        return _COPIES[abs_path]
    from postmortem.analyzer.discover import decode_to, is_utf16, max_decompressed, real_path

    real = Path(real_path(abs_path))
    if "!/" in abs_path and not real.exists():   # an archive member (postmortem.analyzer.archives)
        from postmortem.analyzer.archives import member_copy

        source = member_copy(abs_path)
    else:
        source = real
    kind = COMPRESSED.get(Path(abs_path).suffix.lower())
    with open(source, "rb") as handle:
        utf16 = is_utf16(handle.read(4)) if kind is None else None
    if kind is None and not utf16:
        _COPIES[abs_path] = source
        return source
    target = private_dir() / f"read-{uuid.uuid4().hex[:12]}"
    with open(source, "rb") as handle, open(target, "xb") as sink:
        decode_to(handle, sink, kind, utf16, max_decompressed())
    _COPIES[abs_path] = target
    return target


def schema_markdown(con: duckdb.DuckDBPyConnection) -> str:
    rows = con.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").fetchall()
    out = ["# Store schema", "",
           "Generated by `python -m bench.make_docs` from the bundled deadlock sample; "
           "a test keeps it in step with the code.", "",
           "In a run traced with `NCCL_DEBUG_SUBSYS=COLL`, `collectives` and `nccl_lines` are views "
           "with the same columns: their own rows (`_collectives`, `_nccl_lines`) and a row per COLL "
           "trace line, whose fields are stored once (`_coll_rows`) and whose attribution is that of "
           "the first line of its run (`postmortem.analyzer.bulk`).", ""]
    current = None
    for table, column, dtype in rows:
        if table != current:
            out += ["", f"## `{table}`", "", "| column | type |", "|---|---|"]
            current = table
        out.append(f"| `{column}` | {dtype} |")
    return "\n".join(out).replace("\n\n\n", "\n\n") + "\n"
