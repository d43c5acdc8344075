"""The COLL trace bulk: kept out of the in-memory models, streamed into the store.

With ``NCCL_DEBUG_SUBSYS=COLL`` nearly every line of a log is a COLL trace line (one per
collective per rank: about 10 M lines for 1,024 ranks and 100 iterations). Every such line
is a row of ``lines``, ``nccl_lines`` and ``collectives``, and holding those rows in Polars
through attribution and the models would take tens of GB. Yet consecutive COLL lines of one
process say the same about who wrote them: their attribution is their neighbour's.

So each chunk of inputs (``analyzer.ingest._prepare``) cuts its whole, untorn COLL lines
into *runs*: consecutive lines of one input with the same launcher tags and NCCL
``host:pid [dev]``, broken by any other line. The first line of a run stays in the frames
(with ``_w``, the run's length, so that majority votes in ``analyzer.identity`` weigh every
line); the others are read by position (``parsers.nccl.coll_rows``) and written to a Parquet
file per chunk, shown to the store as one ``_bulk`` view (``Sink``), with ``run_line``, their
run's first line. Once the store is written, ``merge`` adds them to
``lines``, ``nccl_lines`` and ``collectives``: their own fields (offset, length, prefix,
NCCL header, the collective's fields) and everything else (attribution, attempt, ...) from
the first line of their run. The store is the same as if every line had gone through the
models (tests/test_scale_ingest.py holds it to that).
"""

from __future__ import annotations

import os
import shutil
import uuid

import duckdb
import polars as pl

import parsers.nccl
from analyzer import store
from parsers.nccl import SCHEMAS as NCCL_SCHEMAS

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
_FIRST_ROW = {"lines": "", "nccl_lines": "", "collectives": " AND r.kind = 'nccl_coll'"}
SCHEMA = {"input_id": pl.UInt32, "line_no": pl.UInt32, "run_line": pl.UInt32, "offset": pl.UInt64,
          "length": pl.UInt32, "prefix": pl.String, "ext_ts": pl.String, "host": pl.String, "pid": pl.Int64,
          "tid": pl.Int64, "cuda_dev": pl.Int64,
          **{c: t for c, t in NCCL_SCHEMAS["collectives"].items() if c not in ("line_no", "kind", "host", "pid",
                                                                             "tid", "cuda_dev")}}
TABLE = "_bulk"


def cut(lines: pl.DataFrame, is_coll: pl.Series, input_ids: list[int]):
    """Cut a chunk's enveloped lines (``_input``: the input's place in ``input_ids``) at the
    whole COLL trace lines ``is_coll`` marks, into runs. Returns the lines without the bulk (the
    rest of every run), the bulk frame (``SCHEMA``, read by ``parsers.nccl.coll_rows`` alone),
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


def staged(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store shows bulk rows not merged yet (the ``_bulk`` view, ``Sink.stage``)."""
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                            [TABLE]).fetchall()[0][0])


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
        # (input_id, line_no): that input's rows from that line on are left out (analyzer.tails)
        self.dropped: list[tuple[int, int]] = []
        self.old_files: list[str] = []      # files read with ``dropped`` applied (an old parse's)

    def connection(self) -> duckdb.DuckDBPyConnection:
        if self.con is None:
            self.con = self.connect()
        return self.con

    def add(self, path: str) -> None:
        """A chunk's bulk file (``write``), in chunk order."""
        self.files.append(path)

    def stage(self) -> None:
        """The ``_bulk`` view over every file (none: no view)."""
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
        self.rows = con.execute(f"SELECT count(*) FROM {TABLE}").fetchall()[0][0]
        if not self.rows:
            con.execute(f"DROP VIEW {TABLE}")

    def discard(self) -> None:
        """The files, once merged (the store has the rows now)."""
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


# Bulk rows merged per statement: each statement sorts only its own slice, so the memory a
# merge needs does not grow with the run.
MERGE_ROWS = 1_000_000


def merge(con: duckdb.DuckDBPyConnection) -> None:
    """Add the ``_bulk`` rows to ``lines``, ``nccl_lines`` and ``collectives`` (each written with
    an ``_ord`` row number): own columns from the bulk row, the others from the first line of its
    run, rows kept in the tables' order (a bulk line right after its run's first line).

    ``lines`` is rebuilt in slices of its ``_ord`` range, each slice's rows and the bulk rows of
    its runs sorted together and appended in order: it is stored in file order (the TUI's Logs
    screen pages by rowid). ``nccl_lines`` and ``collectives`` get their bulk rows appended:
    rules read COLL rows only through an aggregate (``rules.base.Context.coll_trace_ends``)."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE _runs AS SELECT input_id, run_line, count(*) AS n "
                f"FROM {TABLE} GROUP BY ALL")
    for table, own in OWN.items():
        columns = [r[0] for r in con.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
            [table]).fetchall()]
        picked = ", ".join(f'{"b" if c in own else "r"}."{c}" AS "{c}"' for c in columns)
        first = _FIRST_ROW[table]
        if table != "lines":
            con.execute(f"""INSERT INTO "{table}" SELECT {picked} FROM {TABLE} b JOIN "{table}" r
                            ON r.input_id = b.input_id AND r.line_no = b.run_line{first}""")
            con.execute(f'ALTER TABLE "{table}" DROP COLUMN _ord')
            continue
        slices = _slices(con, table, first)
        con.execute(f'CREATE OR REPLACE TABLE "_merged_{table}" AS SELECT * EXCLUDE (_ord) FROM "{table}" LIMIT 0')
        for lo, hi, input_lo, input_hi in slices:
            con.execute(f"""
                INSERT INTO "_merged_{table}"
                SELECT * EXCLUDE (_ord) FROM (
                    SELECT * FROM "{table}" WHERE _ord >= {lo} AND _ord < {hi}
                    UNION ALL BY NAME
                    SELECT {picked} FROM {TABLE} b JOIN "{table}" r
                      ON r.input_id = b.input_id AND r.line_no = b.run_line{first}
                    WHERE r._ord >= {lo} AND r._ord < {hi} AND b.input_id BETWEEN {input_lo} AND {input_hi})
                ORDER BY _ord, line_no""")
        con.execute(f'DROP TABLE "{table}"')
        con.execute(f'ALTER TABLE "_merged_{table}" RENAME TO "{table}"')
    con.execute(f"DROP VIEW {TABLE}")
    con.execute("DROP TABLE _runs")


def _slices(con: duckdb.DuckDBPyConnection, table: str, first: str) -> list[tuple[int, int, int, int]]:
    """``_ord`` ranges [lo, hi) of ``table`` holding about ``MERGE_ROWS`` bulk rows each, with
    the inputs their runs are in; the last range runs to the end of the table."""
    reps = con.execute(f"""
        SELECT r._ord, r.input_id, u.n FROM "{table}" r JOIN _runs u
          ON r.input_id = u.input_id AND r.line_no = u.run_line{first}
        ORDER BY r._ord""").fetchall()
    end = con.execute(f'SELECT coalesce(max(_ord), 0) + 1 FROM "{table}"').fetchall()[0][0]
    slices, lo, rows, inputs = [], 0, 0, []
    for ord_, input_id, n in reps:
        inputs.append(input_id)
        rows += n
        if rows >= MERGE_ROWS:
            slices.append((lo, ord_ + 1, min(inputs), max(inputs)))
            lo, rows, inputs = ord_ + 1, 0, []
    slices.append((lo, end, min(inputs) if inputs else 0, max(inputs) if inputs else -1))
    return slices
