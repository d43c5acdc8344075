"""The COLL trace bulk: kept out of the in-memory models, streamed into the store.

With ``NCCL_DEBUG_SUBSYS=COLL`` nearly every line of a log is a COLL trace line (one per
collective per rank: about 10 M lines for 1,024 ranks and 100 iterations). Every such line
is a row of ``lines``, ``nccl_lines`` and ``collectives``, and holding those rows in Polars
through attribution and the models would take tens of GB. Yet consecutive COLL lines of one
process say the same about who wrote them: their attribution is their neighbour's.

So each chunk of inputs (``postmortem.analyzer.ingest._prepare``) cuts its whole, untorn COLL lines
into *runs*: consecutive lines of one input with the same launcher tags and NCCL
``host:pid [dev]``, broken by any other line. The first line of a run stays in the frames
(with ``_w``, the run's length, so that majority votes in ``postmortem.analyzer.identity`` weigh every
line); the others are read by position (``postmortem.parsers.nccl.coll_rows``) and written to a Parquet
file per chunk, shown to the store as one ``_bulk`` view (``Sink``), with ``run_line``, their
run's first line. Once the store is written, ``merge`` adds them to
``lines``, ``nccl_lines`` and ``collectives``: their own fields (offset, length, prefix,
NCCL header, the collective's fields) and everything else (attribution, attempt, ...) from
the first line of their run. The store is the same as if every line had gone through the
models (tests/test_scale_ingest.py holds it to that).

Each bulk row is written once, into a chunk's file, and each skimmed line (the middle of a log
too large to parse whole: ``skim_cut``) once, into a skimmed chunk's file. The store shows them
as ``_coll_rows`` and ``_skim_rows``: views over those files where the store has no file of its
own, tables of its file with ``--db`` (``merge``). ``lines``, ``nccl_lines``
and ``collectives`` become views over their own rows (``_lines``, ... kept in their order) and
those (``show``): writing 4 M rows into each cost more than half of a 64-rank COLL run's store
(``lines`` alone, sorted into file order: 3.7 s of 6 s), and sorting a 535 MB log's 2.2 M
skimmed lines in among the kept ones 7 s. Reading the COLL rows through a view costs what
reading the tables did (rules read them through one aggregate; a filter on ``kind`` skips
them); a query over every row of ``lines`` pays the join (about 0.3 s more for a report of 4.3
M lines), and the TUI's Logs screen orders lines by their number, not by where they are stored.
"""

from __future__ import annotations

import os
import shutil
import uuid

import duckdb
import polars as pl

from postmortem import parsers

import postmortem.parsers.nccl  # noqa: F401  (loads the submodule)
from postmortem.analyzer import store
from postmortem.parsers.nccl import COLL_KIND
from postmortem.parsers.nccl import SCHEMAS as NCCL_SCHEMAS

# What makes two consecutive COLL lines one run: the launcher tags (the stream) and the NCCL
# header's host, pid and [cudaDev].
LAUNCHER_TAGS = ["srun_task", "mpi_rank", "local_rank", "rank_tag", "host_tag", "ray_pid"]
WRITER = ["host", "pid", "cuda_dev"]
# Each table's columns a bulk row brings itself; the rest come from the first line of its run.
OWN = {
    "lines": ["input_id", "line_no", "offset", "length", "prefix", "ext_ts"],
    "nccl_lines": ["input_id", "line_no", "host", "pid", "tid", "cuda_dev"],
    "collectives": ["input_id", "line_no", *[c for c in NCCL_SCHEMAS["collectives"] if c not in ("line_no", "kind")]],
}
# Which row of the table is the run's first line (collectives: the NCCL row of that line).
_FIRST_ROW = {"lines": "", "nccl_lines": "", "collectives": f" AND r.kind = '{COLL_KIND}'"}
# What every bulk row has in each table, shown as constants so that a filter on them skips the
# join where it cannot match (the rules' queries of ``lines`` by kind or for text, of
# ``nccl_lines`` for unknown kinds, of ``collectives`` without COLL rows). It is what the first
# line of its run has: a whole COLL line, which only the NCCL parser reads, understood, so its
# text is not kept (``postmortem.analyzer.ingest._drop_nccl_info_text``).
_CONSTANT = {"lines": {"kind": parsers.nccl.NAME, "text": None},
             "nccl_lines": {"kind": parsers.nccl.KINDS[0].name}, "collectives": {"kind": COLL_KIND}}
SCHEMA = {"input_id": pl.UInt32, "line_no": pl.UInt32, "run_line": pl.UInt32, "offset": pl.UInt64,
          "length": pl.UInt32, "prefix": pl.String, "ext_ts": pl.String, "host": pl.String, "pid": pl.Int64,
          "tid": pl.Int64, "cuda_dev": pl.Int64,
          **{c: t for c, t in NCCL_SCHEMAS["collectives"].items() if c not in ("line_no", "kind", "host", "pid",
                                                                             "tid", "cuda_dev")}}
TABLE = "_bulk"
# The bulk rows in the store, written once: ``lines``, ``nccl_lines`` and ``collectives`` show them (``show``).
ROWS = "_coll_rows"
_ROWS_COLUMNS = ["input_id", "line_no", "run_line",
                 *dict.fromkeys(c for table in OWN for c in OWN[table] if c not in ("input_id", "line_no"))]
SKIM = "_skim"


def cut(lines: pl.DataFrame, is_coll: pl.Series, input_ids: list[int]):
    """Cut a chunk's enveloped lines (``_input``: the input's place in ``input_ids``) at the
    whole COLL trace lines ``is_coll`` marks, into runs. Returns the lines without the bulk (the
    rest of every run), the bulk frame (``SCHEMA``, read by ``postmortem.parsers.nccl.coll_rows`` alone),
    the first lines' ``_w`` (``input_id``, ``line_no``, ``_w``), which of ``lines`` were kept (a
    mask) and the bulk lines per input.

    Lines of a run are adjacent rows of one input (the envelope has a row per physical line).
    Every COLL line is read by position once; its header's host, pid and [cudaDev] then say
    whether it continues the run of the COLL line before it."""
    at = is_coll.arg_true()
    coll = lines[at].with_columns(_at=at)
    fields = parsers.nccl.coll_rows(coll.select(pl.int_range(pl.len(), dtype=pl.UInt32).alias("line_no"), "text"))
    coll = pl.concat([coll.drop("text"), fields.drop("line_no", "kind")], how="horizontal")
    # the rest of a run: the line right after a COLL line of the same input and writer
    same = [pl.col(c).eq_missing(pl.col(c).shift(1)) for c in ["_input", *LAUNCHER_TAGS, *WRITER]]
    rest = ((pl.col("_at") == pl.col("_at").shift(1) + 1) & pl.all_horizontal(same)).fill_null(False)
    coll = coll.with_columns(_rest=rest).with_columns(
        run_line=pl.when(~pl.col("_rest")).then(pl.col("line_no")).forward_fill())
    ids = pl.Series(input_ids, dtype=pl.UInt32)
    frame = coll.filter(pl.col("_rest")).with_columns(
        input_id=pl.col("_input").replace_strict(pl.int_range(len(ids), eager=True, dtype=pl.UInt32), ids))
    frame = frame.select([pl.col(c).cast(t) for c, t in SCHEMA.items()])
    keep = pl.repeat(True, lines.height, dtype=pl.Boolean, eager=True).scatter(
        coll.filter(pl.col("_rest"))["_at"], False)
    weights = frame.group_by("input_id", "run_line").agg(_w=(pl.len() + 1).cast(pl.UInt32)).rename(
        {"run_line": "line_no"})
    counts = dict(frame.group_by("input_id").len().iter_rows())
    return lines.filter(keep), frame, weights, keep, counts


# -- skimmed lines (postmortem.analyzer.ingest.plan_skim): the middle of a log too large for the budget ----

# A line worth parsing wherever it is: what failures, warnings and the ends of jobs look like.
FAILURE = (r"(?i)error|exception|traceback|warn|fatal|fail|abort|timeout|timed out|watchdog|killed|\bsig[a-z]*\b|"
           r"signal|terminat|\boom\b|out of memory|\bnan\b|\binf\b|\bxid\b|segmentation|core dump|assert|"
           r"desync|mismatch|exit ?code|exitcode|rendezvous|restart|interrupt|cancel|checkpoint|\bsav(?:e|ed|ing)\b")
# Lines kept after each such line (a traceback's frames, the lines a WARN explains).
CONTEXT = 30
SKIM_SCHEMA = {"input_id": pl.UInt32, "line_no": pl.UInt32, "run_line": pl.UInt32, "offset": pl.UInt64,
               "length": pl.UInt32, "prefix": pl.String, "ext_ts": pl.String, "text": pl.String}
SKIM_OWN = ["input_id", "line_no", "offset", "length", "prefix", "ext_ts", "text", "kind"]
SKIM_PREFIX = "skim-"


def skim_cut(lines: pl.DataFrame, skimmed: dict[int, int], input_ids: list[int]):
    """Of a chunk's enveloped lines (``_input``: the place in ``input_ids``), those of the
    skimmed pieces (``skimmed``: ``_input`` -> bytes of failure-like lines they may keep): which
    stay (lines that look like failures, ``FAILURE``, and ``CONTEXT`` lines after each, up to the
    piece's bytes; the first line of each launcher stream in the piece) and which go to the
    store unparsed (``SKIM_SCHEMA``, each with ``run_line``: the kept line before it of its
    stream, whose attribution it takes). Returns the lines that stay, the skimmed frame, the
    kept lines' extra weights (``input_id``, ``line_no``, ``_x``), the mask of kept rows and the
    skimmed lines per input."""
    tags = [c for c in LAUNCHER_TAGS if c in lines.columns]
    limits = pl.DataFrame({"_input": list(skimmed), "_limit": list(skimmed.values())},
                          schema={"_input": pl.UInt32, "_limit": pl.Int64})
    frame = lines.with_row_index("_row").join(limits, on="_input", how="left", maintain_order="left")
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("") for c in tags], separator="|") if tags else pl.lit("")
    hit = pl.col("text").fill_null("").str.contains(FAILURE)
    frame = frame.with_columns(_key=key, _hit=hit)
    frame = frame.with_columns(_last=pl.when(pl.col("_hit")).then(pl.col("line_no")).forward_fill().over("_input"))
    context = (pl.col("line_no").cast(pl.Int64) - pl.col("_last").cast(pl.Int64)).le(CONTEXT).fill_null(False)
    frame = frame.with_columns(_ctx=context)
    spent = pl.when(pl.col("_ctx")).then(pl.col("length").cast(pl.Int64)).otherwise(0).cum_sum().over("_input")
    first = pl.col("line_no").rank("ordinal").over("_input", "_key") == 1
    keep = pl.col("_limit").is_null() | (pl.col("_ctx") & (spent <= pl.col("_limit"))) | first
    frame = frame.with_columns(_keep=keep)
    frame = frame.with_columns(run_line=pl.when(pl.col("_keep")).then(pl.col("line_no")).forward_fill()
                               .over("_input", "_key"))
    ids = pl.Series(input_ids, dtype=pl.UInt32)
    gone = frame.filter(~pl.col("_keep")).with_columns(
        input_id=pl.col("_input").replace_strict(pl.int_range(len(ids), eager=True, dtype=pl.UInt32), ids))
    skimmed_frame = gone.select([pl.col(c).cast(t) for c, t in SKIM_SCHEMA.items()])
    mask = frame["_keep"]
    extra = skimmed_frame.group_by("input_id", "run_line").agg(_x=pl.len().cast(pl.UInt32)).rename(
        {"run_line": "line_no"})
    counts = dict(skimmed_frame.group_by("input_id").len().iter_rows())
    return lines.filter(mask), skimmed_frame, extra, mask, counts


def staged(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store shows bulk rows not merged yet (the ``_bulk`` view, ``Sink.stage``)."""
    return TABLE in _views(con)


class Sink:
    """Collects the COLL trace bulk of a run: each chunk's rows are a Parquet file in ``spool``
    (written by whoever parsed the chunk, a worker process or this one: ``write``), and
    ``stage`` shows them all to the store as one ``_bulk`` view. So the bulk never crosses
    from a worker to this process, and is never inserted twice. The store is opened
    (``connect()``) at ``stage``, so a run without bulk opens it as before."""

    def __init__(self, connect) -> None:
        self.connect = connect
        self.con: duckdb.DuckDBPyConnection | None = None
        self.rows = 0      # the rows ``stage`` shows
        self.spool = str(store.private_dir() / f"bulk-{uuid.uuid4().hex[:12]}")
        self.files: list[str] = []
        self.skim_files: list[str] = []     # skimmed lines (``skim_cut``), for ``lines`` only
        # (input_id, line_no): that input's rows from that line on are left out (postmortem.analyzer.tails)
        self.dropped: list[tuple[int, int]] = []
        self.old_files: list[str] = []      # files read with ``dropped`` applied (an old parse's)

    def connection(self) -> duckdb.DuckDBPyConnection:
        if self.con is None:
            self.con = self.connect()
        return self.con

    def add(self, path: str) -> None:
        """A chunk's bulk file (``write``), in chunk order; a skimmed chunk's (``skim-``) apart."""
        (self.skim_files if os.path.basename(path).startswith(SKIM_PREFIX) else self.files).append(path)

    def stage(self) -> None:
        """The ``_bulk`` view over every COLL file, ``_skim`` over the skimmed lines (none: no view)."""
        if self.skim_files:
            con = self.connection()
            con.execute(f"CREATE OR REPLACE VIEW {SKIM} AS SELECT * FROM read_parquet({_list(self.skim_files)})")
            self.rows += con.execute(f"SELECT count(*) FROM {SKIM}").fetchall()[0][0]
        if not self.files and not self.old_files:
            return
        con = self.connection()
        parts = []
        if self.old_files:
            keep = " AND ".join(f"NOT (input_id = {i} AND line_no >= {n})" for i, n in self.dropped) or "true"
            parts.append(f"SELECT * FROM read_parquet({_list(self.old_files)}) WHERE {keep}")
        if self.files:
            parts.append(f"SELECT * FROM read_parquet({_list(self.files)})")
        con.execute(f"CREATE OR REPLACE VIEW {TABLE} AS " + " UNION ALL ".join(parts))
        rows = con.execute(f"SELECT count(*) FROM {TABLE}").fetchall()[0][0]
        self.rows += rows
        if not rows:
            con.execute(f"DROP VIEW {TABLE}")

    def bulk_files(self, con: duckdb.DuckDBPyConnection) -> list[str]:
        """The files of the ``_bulk`` rows: the chunks' own, or where an old parse's files show
        only some of their rows (``dropped``: a grown log's tail parsed again), what the view
        shows written as one file (rare: a live hang analysed twice)."""
        if not self.old_files:
            return list(self.files)
        path = os.path.join(self.spool, f"rows-{uuid.uuid4().hex[:12]}.parquet")
        con.execute(f"COPY {TABLE} TO '{store.sql_path(path)}' (FORMAT parquet, COMPRESSION zstd)")
        return [path]

    def discard(self) -> None:
        """The files, once merged into a store's file (``merge`` without the sink)."""
        shutil.rmtree(self.spool, ignore_errors=True)


def _list(files: list[str]) -> str:
    return "[" + ", ".join(f"'{store.sql_path(f)}'" for f in files) + "]"


def write(frame: pl.DataFrame, spool: str, name: str) -> str | None:
    """One chunk's bulk rows as ``spool/name.parquet``; None when there are none."""
    if frame.is_empty():
        return None
    os.makedirs(spool, exist_ok=True)
    path = os.path.join(spool, f"{name}.parquet")
    frame.write_parquet(path, compression="zstd", statistics=True)
    return path


# The skimmed lines in the store, written once: ``lines`` shows them (``show``).
SKIM_ROWS = "_skim_rows"


def merge(con: duckdb.DuckDBPyConnection, sink: Sink | None = None) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """Show the ``_bulk`` rows in ``lines``, ``nccl_lines`` and ``collectives``, and the ``_skim``
    rows in ``lines``: own columns from the bulk row, the others from the first line of its run
    (a skimmed line: the kept line of its stream before it). Each is kept once, in any order, as
    ``ROWS`` or ``SKIM_ROWS``, and the tables (in the store already, their own rows in their
    order) become views that add them (``show``). Rules read COLL rows only through an
    aggregate (``postmortem.rules.base.Context.coll_trace_ends``).

    With ``sink`` (a store without a file of its own), ``ROWS`` and ``SKIM_ROWS`` are views over
    the sink's Parquet files, which stay in the private folder (not ``discard``-ed): writing the
    64-rank COLL trace's 4 M rows into the store took 1.6 s, and a 535 MB log's skimmed lines
    1.1 s. Without (``--db``), they are tables of its file, which users open after the process.
    Returns which parts each table shows (for ``show``) and, with ``sink``, each part's files."""
    existing = _views(con)      # the staged rows, and a large run's tables (``store.write_files``)
    views = existing & {TABLE, SKIM}
    files: dict[str, list[str]] = {}
    if sink is not None:
        if TABLE in views:
            files[ROWS] = sink.bulk_files(con)
            con.execute(f"CREATE VIEW {ROWS} AS SELECT {_listed(_ROWS_COLUMNS)} FROM read_parquet({_list(files[ROWS])})")
        if SKIM in views:
            files[SKIM_ROWS] = list(sink.skim_files)
            con.execute(f"CREATE VIEW {SKIM_ROWS} AS SELECT {_listed(SKIM_SCHEMA)} "
                        f"FROM read_parquet({_list(files[SKIM_ROWS])})")
    else:
        # In any order: DuckDB then writes the rows to the file as it reads them, rather than
        # holding chunks that end inside a row group for the next checkpoint (2-3 s more).
        con.execute("SET preserve_insertion_order = false")
        try:
            if TABLE in views:
                con.execute(f"CREATE TABLE {ROWS} AS SELECT {_listed(_ROWS_COLUMNS)} FROM {TABLE}")
            if SKIM in views:
                con.execute(f"CREATE TABLE {SKIM_ROWS} AS SELECT {_listed(SKIM_SCHEMA)} FROM {SKIM}")
        finally:
            con.execute("RESET preserve_insertion_order")
    parts = {table: ([ROWS] if TABLE in views else []) + ([SKIM_ROWS] if table == "lines" and SKIM in views else [])
             for table in OWN}
    parts = {table: names for table, names in parts.items() if names}
    for table in parts:
        con.execute(f'ALTER {"VIEW" if table in existing else "TABLE"} "{table}" RENAME TO "_{table}"')
    for table, names in parts.items():
        show(con, table, names)
    for view in views:
        con.execute(f"DROP VIEW {view}")
    return parts, files


def _listed(columns) -> str:
    return ", ".join(f'"{c}"' for c in columns)


def _part(rows: str, table: str) -> tuple[list[str], str, dict]:
    """The columns ``rows`` (``ROWS``, ``SKIM_ROWS``) bring themselves to ``table``, which row of
    ``table`` is the first line of their run, and the columns all of them have alike there."""
    return (OWN[table], _FIRST_ROW[table], _CONSTANT[table]) if rows == ROWS else (SKIM_OWN, "", {})


PARTS = (ROWS, SKIM_ROWS)


def show(con: duckdb.DuckDBPyConnection, table: str, parts: list[str]) -> None:
    """``table`` as a view: its own rows (``_<table>``) and a row per line of each part's stored
    rows (``ROWS``, ``SKIM_ROWS``): the part's own columns from that row (a column the rows lack
    is null), the others from the first line of its run. So each bulk row is kept once, not
    once per table; the view's rows are the rows the table would hold."""
    if table not in OWN or not parts or not set(parts) <= set(PARTS):
        raise ValueError(f"no such bulk view: {table!r} of {parts!r}")
    columns = _columns(con, f"_{table}")
    selects = [f'SELECT {_listed(columns)} FROM "_{table}"']
    for rows in parts:
        own, first, constant = _part(rows, table)
        stored = set(_columns(con, rows))
        picked = ", ".join(
            (f'b."{c}" AS "{c}"' if c in stored else f'NULL AS "{c}"') if c in own else
            (f"'{constant[c]}' AS \"{c}\"" if constant[c] is not None else f'NULL AS "{c}"') if c in constant else
            f'r."{c}" AS "{c}"' for c in columns)
        selects.append(f'SELECT {picked} FROM {rows} b JOIN "_{table}" r '
                       f"ON r.input_id = b.input_id AND r.line_no = b.run_line{first}")
    con.execute(f'CREATE VIEW "{table}" AS ' + " UNION ALL ".join(selects))


# The store's own catalogue (``store.STORE_COLUMNS``, ``duckdb_views()``): information_schema
# lists DuckDB's system views too, 5-7 ms a question where a cache hit asks six.
def _views(con: duckdb.DuckDBPyConnection) -> set[str]:
    return {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal "
                                      "AND database_name = current_database() AND schema_name = 'main'").fetchall()}


def _columns(con: duckdb.DuckDBPyConnection, table: str) -> list[str]:
    return [r[1] for r in con.execute(store.STORE_COLUMNS + " AND table_name = ? ORDER BY column_index",
                                      [table]).fetchall()]
