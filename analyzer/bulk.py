"""The COLL trace bulk: kept out of the in-memory models, streamed into the store.

With ``NCCL_DEBUG_SUBSYS=COLL`` nearly every line of a log is a COLL trace line (one per
collective per rank: about 10 M lines for 1,024 ranks and 100 iterations). Every such line
is a row of ``lines``, ``nccl_lines`` and ``collectives``, and holding those rows in Polars
through attribution and the models would take tens of GB. Yet consecutive COLL lines of one
process say the same about who wrote them: their attribution is their neighbour's.

So each chunk of inputs (``analyzer.ingest.parse_chunk``) cuts its whole, untorn COLL lines
into *runs*: consecutive lines of one input with the same launcher tags and NCCL
``host:pid [dev]``, broken by any other line. The first line of a run stays in the frames
(with ``_w``, the run's length, so that majority votes in ``analyzer.identity`` weigh every
line); the others go to a ``_bulk`` table of the store as the chunk arrives (``Sink``), with
``run_line``, their run's first line. Once the store is written, ``merge`` adds them to
``lines``, ``nccl_lines`` and ``collectives``: their own fields (offset, length, prefix,
NCCL header, the collective's fields) and everything else (attribution, attempt, ...) from
the first line of their run. The store is the same as if every line had gone through the
models (tests/test_scale_ingest.py holds it to that).
"""

from __future__ import annotations

import duckdb
import polars as pl

from parsers.nccl import SCHEMAS as NCCL_SCHEMAS

# What makes two consecutive COLL lines one run: the launcher tags (the stream) and the header.
RUN_KEY = ["srun_task", "mpi_rank", "local_rank", "rank_tag", "host_tag", "ray_pid", "host", "pid", "cuda_dev"]
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


def split(lines: pl.DataFrame, tables: dict[str, pl.DataFrame], traced: pl.DataFrame | None):
    """Cut a chunk's COLL lines (``traced``: their input_id, line_no) into runs. Returns the
    lines (first lines of runs carrying ``_w``), the tables without the bulk rows, the bulk
    frame (``SCHEMA``) and the bulk lines per input; or None when there is nothing to cut."""
    nccl_lines, colls = tables.get("nccl_lines"), tables.get("collectives")
    if traced is None or traced.is_empty() or nccl_lines is None or colls is None:
        return None
    own = [c for c in SCHEMA if c not in ("input_id", "line_no", "run_line", "offset", "length", "prefix", "ext_ts")]
    coll_own = [c for c in own if c not in ("host", "pid", "tid", "cuda_dev")]
    keys = ["input_id", "line_no"]
    rows = (traced.join(nccl_lines.filter(pl.col("kind") == "coll").select(*keys, "host", "pid", "tid", "cuda_dev"),
                        on=keys)
            .join(colls.filter((pl.col("kind") == "nccl_coll") & (pl.col("parser") == "nccl")).select(*keys, *coll_own),
                  on=keys))
    if rows.is_empty():
        return None
    marked = lines.join(rows.select(*keys, "host", "pid", "cuda_dev", _bulk=pl.lit(True)), on=keys, how="left",
                        maintain_order="left")
    is_bulk = pl.col("_bulk").fill_null(False)
    key = pl.concat_str([pl.col(c).cast(pl.String).fill_null("\x00") for c in ["input_id", *RUN_KEY]], separator="\x1f")
    new_run = is_bulk & (~is_bulk.shift(1).fill_null(False) | (key != key.shift(1)).fill_null(True))
    marked = marked.with_columns(_new=new_run).with_columns(
        run_line=pl.when(pl.col("_new")).then(pl.col("line_no")).forward_fill())
    marked = marked.with_columns(run_line=pl.when(is_bulk).then(pl.col("run_line")))
    weights = marked.filter(is_bulk).group_by("input_id", "run_line").agg(_w=pl.len().cast(pl.UInt32))
    first = marked.filter(~is_bulk | pl.col("_new"))
    first = first.join(weights.rename({"run_line": "line_no"}), on=keys, how="left", maintain_order="left")
    kept_lines = first.drop("_bulk", "_new", "run_line", "host", "pid", "cuda_dev").with_columns(
        _w=pl.col("_w").fill_null(1))
    rest = marked.filter(is_bulk & ~pl.col("_new")).select(*keys, "run_line", "offset", "length", "prefix", "ext_ts")
    bulk = rest.join(rows, on=keys, maintain_order="left").select(
        [pl.col(c).cast(t) for c, t in SCHEMA.items()])
    gone = bulk.select(keys)
    kept = dict(tables)
    kept["nccl_lines"] = nccl_lines.join(gone, on=keys, how="anti", maintain_order="left")
    kept["collectives"] = colls.join(gone, on=keys, how="anti", maintain_order="left")
    counts = dict(bulk.group_by("input_id").len().iter_rows())
    return kept_lines, kept, bulk, counts


def staged(con: duckdb.DuckDBPyConnection) -> bool:
    """Whether the store holds bulk rows not merged yet (a ``_bulk`` table)."""
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                            [TABLE]).fetchall()[0][0])


class Sink:
    """Appends each chunk's bulk rows to ``_bulk`` in the store as they arrive. The store is
    opened (``connect()``) at the first rows, so a run without bulk opens it as before."""

    def __init__(self, connect) -> None:
        self.connect = connect
        self.con: duckdb.DuckDBPyConnection | None = None
        self.rows = 0

    def connection(self) -> duckdb.DuckDBPyConnection:
        if self.con is None:
            self.con = self.connect()
        return self.con

    def __call__(self, frame: pl.DataFrame) -> None:
        if frame.is_empty():
            return
        self.connection()
        self.con.register("_incoming_bulk", frame.to_arrow())
        try:
            if self.rows:
                self.con.execute(f"INSERT INTO {TABLE} SELECT * FROM _incoming_bulk")
            else:
                self.con.execute(f"CREATE OR REPLACE TABLE {TABLE} AS SELECT * FROM _incoming_bulk")
        finally:
            self.con.unregister("_incoming_bulk")
        self.rows += frame.height


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
    con.execute(f"DROP TABLE {TABLE}")
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
