"""paths -> discover -> parse (parallel) -> identity -> clocks -> DuckDB store.

``analyze`` returns a ``Run``: the open DuckDB connection with every table, plus what the
report needs to say about the run (world size, attempts, how times were inferred, which
inputs were skipped and why).
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb
import polars as pl

from postmortem.analyzer import (budget, bulk, cache, collective_timing, env_model, identity, nccl_errors, nccl_model, node_model, store,
                      tails, timeline)
from postmortem.analyzer.archives import Scratch
from postmortem.analyzer.discover import discover, materialize, path_parts
from postmortem.analyzer.gc_passes import fewer_passes
from postmortem.analyzer.ingest import SEGMENT_BYTES, Progress, parse_all, row_order
from postmortem.parsers.base import collect_each

LINE_COLUMNS = ["input_id", "line_no", "offset", "length", "kind", "rank", "rank_source", "rank_confidence",
                "node", "node_source", "pid", "attempt", "attempt_source", "prefix", "ext_ts", "srun_task",
                "mpi_rank", "local_rank", "rank_tag", "host_tag", "text"]


@dataclass
class Run:
    con: duckdb.DuckDBPyConnection
    info: dict = field(default_factory=dict)
    messages: list[str] = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    db_path: str | None = None
    cache_key: str | None = None   # the key of this store in analyzer.cache (None: cache off)
    # Tables that are views over Parquet files (a large run's, store.write_files, or a cache
    # hit's, postmortem.analyzer.cache.load): the file of each table whose frame is what a
    # ``SELECT *`` of it gives (``kept``).
    stored_frames: dict[str, Path] = field(default_factory=dict, repr=False)

    def frame(self, sql: str, params: list | None = None) -> pl.DataFrame:
        relation = self.con.sql(sql, params=params or None)
        if any("INTERVAL" in str(dtype) for dtype in relation.types):
            return relation.pl()    # Polars cannot read an interval (DuckDB's reader says so; Polars' panics)
        # Polars reads the result's Arrow stream itself: the same frame for every table of every
        # sample, 6% less time than ``.pl()`` over 3,750 replayed report queries (a report asks 40-90).
        return pl.DataFrame(relation)

    # Frames the analysis wrote to the store, which a query of their table would give back as
    # they are (``keep_written``): ``rules.base.Context.table`` reads these instead.
    written: dict[str, pl.DataFrame] = field(default_factory=dict, repr=False)
    pending_cache: threading.Thread | None = field(default=None, repr=False)   # see cache_written
    _frozen_columns: dict | None = field(default=None, repr=False)   # see schema_frozen
    _derived: dict = field(default_factory=dict, repr=False)          # see derived

    def derived(self, key: tuple, compute):
        """``compute()``, once per run and ``key``: for what is read from the tables the analysis
        wrote, which nothing after it changes (the report, its rules and pictures ask again)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def columns(self, table: str) -> list[str]:
        """Column names of ``table`` in the store; empty when the run has no such table. (From
        ``duckdb_columns()`` of the store's schema, ``store.STORE_COLUMNS``: faster than
        information_schema. Not ``con.table(name)``: for a missing table DuckDB would look for a
        Python variable of that name instead.)"""
        if self._frozen_columns is not None:
            return list(self._frozen_columns.get(table, ()))
        rows = self.con.execute(store.STORE_COLUMNS + " AND table_name = ? ORDER BY column_index", [table]).fetchall()
        return [r[1] for r in rows]

    def table(self, name: str) -> pl.DataFrame:
        """Every row of ``name``: the frame the analysis kept (``keep_written``), else a query;
        an empty frame when the store has no such table."""
        kept = self.kept(name)
        if kept is not None:
            return kept
        return self.frame(f'SELECT * FROM "{name}"') if self.columns(name) else pl.DataFrame()

    def kept(self, name: str) -> pl.DataFrame | None:
        """The frame a ``SELECT *`` of ``name`` gives, where the run has it without a query: kept
        in memory (``keep_written``), or its Parquet file (``stored_frames``); else None."""
        if name in self.written:
            return self.written[name]
        path = self.stored_frames.get(name)
        if path is None:
            return None
        try:
            return pl.read_parquet(path)
        except (OSError, pl.exceptions.PolarsError):   # the query reads it instead
            self.stored_frames.pop(name, None)
            return None

    def start_cache(self) -> None:
        """Start writing the cache entry (and the parse entry) that ``analyze(background_cache=True,
        start_cache=False)`` prepared (nothing when there is none, or it has started)."""
        thread = self.pending_cache
        if thread is not None and thread.ident is None:
            try:
                thread.start()
            except RuntimeError:    # started by another thread meanwhile
                pass

    def cache_written(self) -> None:
        """Wait until the cache entry a thread is writing (``analyze(background_cache=True)``) is
        written or given up, starting it if it has not started: before the store is closed, or
        the process ends."""
        thread = self.pending_cache
        if thread is not None:
            self.start_cache()
            thread.join()
            self.pending_cache = None

    def keep_written(self, frames: dict[str, pl.DataFrame]) -> None:
        """Keep ``frames``, just written to the store, where a ``SELECT *`` of their table gives
        them back unchanged (``store.read_back_unchanged``), the smallest first, up to
        ``budget.kept_tables_bytes`` in all. A report asks for 40-90 tables; each query costs
        1.5-2 ms on a small table and 0.3-0.5 s for the 200,000 events of a 1,024-rank run."""
        self.written.update(sorted(store.read_back_unchanged(self.con, frames).items(),
                                   key=lambda item: item[1].estimated_size()))
        self.keep_at_most(budget.kept_tables_bytes())

    def keep_at_most(self, room: int) -> None:
        """Let go of the largest kept frames until the rest fit in ``room`` bytes. They are kept
        smallest first, so what is left is the most of them that fit: ``keep_written``'s rule,
        and what a run held open after its report (the terminal UI, whose screens ask few
        tables) keeps of a smaller room."""
        held = sum(frame.estimated_size() for frame in self.written.values())
        for name in reversed(list(self.written)):
            if held <= room:
                break
            held -= self.written.pop(name).estimated_size()

    def _all_columns(self) -> dict[str, list[str]]:
        """Every table's column names, in one query."""
        return {name: [column for column, _ in columns] for name, columns in store.columns_by_table(self.con).items()}

    @contextmanager
    def schema_frozen(self):
        """A stretch of work that creates and alters no table (the rules): ``columns`` asks
        the store once for every table's columns instead of each time (1-2 ms a question,
        about 90 per report, for a few dozen tables)."""
        outer = self._frozen_columns
        if outer is None:
            self._frozen_columns = self._all_columns()
        try:
            yield self
        finally:
            self._frozen_columns = outer


class NothingReadable(Exception):
    """No input could be read at all (exit code 2)."""


@fewer_passes
def analyze(paths: list[str | Path], db_path: str | Path | None = None, progress: bool = False,
            exclude: list[str | Path] | None = None, progress_stream=None, use_cache: bool | None = None,
            follow_symlinks: bool = False, background_cache: bool = False, start_cache: bool = True) -> Run:
    """``exclude``: files or folders not to read (the report's own --out folder).
    ``progress_stream``: where progress lines go instead of stderr (the TUI's loading screen).
    ``use_cache``: reuse (and keep) the parsed run in ``postmortem.analyzer.cache`` (default: on unless
    ``POSTMORTEM_CACHE=off``). ``follow_symlinks``: read links that lead out of the input
    folders (``postmortem.analyzer.discover``). ``background_cache``: an in-memory store is
    copied into the cache by a thread while the caller goes on (``cache.save``); the caller
    calls ``Run.cache_written`` before it closes the store. ``start_cache`` False: that thread,
    and the one writing the parse entry for growing logs (``tails.save``), wait for
    ``Run.start_cache`` (or ``cache_written``)."""
    started = time.perf_counter()
    exclude = {Path(p) for p in exclude or []} | ({Path(db_path)} if db_path else set())
    meter = Progress(progress or progress_stream is not None, stream=progress_stream)
    use_cache = cache.enabled() if use_cache is None else use_cache
    no_cache_why = cache.usable() if use_cache else None
    if no_cache_why:
        use_cache = False
    # Archive members are copied into a private temporary directory for parsing; it is gone
    # once the inputs are parsed (evidence is read back from the archive: analyzer.archives).
    with Scratch() as scratch:
        try:
            meter.status("finding the inputs")
            items, errors = discover(paths, exclude=exclude, scratch=scratch, progress=meter.status,
                                     follow_symlinks=follow_symlinks)
            if not items:
                raise NothingReadable("; ".join(errors) or "no input files found")
            if no_cache_why:
                errors.append(no_cache_why)
            t_discover = time.perf_counter()
            if len(paths) > 1:
                # Inputs in one order whatever the order the paths were given in (input ids, and
                # so every table's row order, follow it).
                items.sort(key=lambda i: (path_parts(i.display), i.source or str(i.path)))
            run_key = cache.key(items) if use_cache else None
            hit = cache.load(run_key, db_path) if run_key else None
            if hit:
                con, meta, stored_frames = hit
                return Run(con, meta["info"], meta["messages"], {"cache": "hit", "total_ingest_s": round(
                    time.perf_counter() - started, 3)}, db_path=str(db_path) if db_path else None,
                           cache_key=run_key, stored_frames=stored_frames)
            # A large run's tables are Parquet files (store.write_files). A COLL trace's bulk is
            # kept out of memory: files the store reads at the end (postmortem.analyzer.bulk).
            spill = sum(i.size for i in items) >= store.SPILL_BYTES
            sink = bulk.Sink(lambda: store.connect(db_path, capped=spill))
            # A live hang's logs grow between two analyses: parse only what they gained.
            paths_key = tails.paths_key(items, cache.code_version()) if use_cache else None
            plan = tails.plan(cache.root(), paths_key, items) if paths_key else None
            parsed, tail_info, saving = None, None, None
            if plan is not None:
                meter.status(f"re-reading the tails of {len(plan.grown)} grown file(s)")
                before = [(item.kind, list(item.problems)) for item in items]
                try:
                    parsed, tail_info = tails.reparse(plan, items, sink)
                except Exception as exc:  # a damaged parse entry costs a full parse, never the report
                    errors.append(f"cached parse of these inputs unusable ({type(exc).__name__}); parsed in full")
                    sink = bulk.Sink(lambda: store.connect(db_path, capped=spill))
                    for item, (kind, problems) in zip(items, before):
                        item.kind, item.problems = kind, problems
            if parsed is None:
                # large compressed inputs and UTF-16 text get a plain copy in the scratch folder,
                # so that they are cut into segments like any plain log (memory stays flat)
                materialize(items, scratch, SEGMENT_BYTES)
                parsed = parse_all(items, progress=meter, sink=sink)
            if paths_key:
                # The TUI's parse entry waits for its first screen, as its cache entry does (1,024
                # ranks: the verdict 0.18 s sooner), where holding the frames until then is cheap
                # (the 10,000-rank run's 741 MiB raised the UI's peak by 114-146 MiB).
                wait = background_cache and not start_cache and _held_bytes(parsed) <= budget.held_tables_bytes()
                saving = tails.save(cache.root(), paths_key, parsed, sink, start=not wait)
        finally:
            meter.close()
    t_parse = time.perf_counter()
    if parsed.lines.is_empty():
        # Issue 8: profiler inputs (nsys exports, Kineto traces) have tables but no lines.
        # Flight Recorder dumps (issue 4) likewise: a folder of dumps alone is analysable.
        if not any(name in parsed.tables for name in (*collective_timing.PROFILE_TABLES, "fr_dumps")):
            raise NothingReadable("no readable log lines: " + "; ".join(errors + parsed.messages))
        parsed.lines = collective_timing.empty_lines()
    meter.status(f"identifying ranks, nodes and attempts ({len(parsed.lines):,} lines)")
    attribution, ranks, info = identity.resolve(parsed.lines, parsed.tables, parsed.inputs)
    by_line = ByLine(attribution)
    tables = _annotate(parsed.tables, by_line)
    year, year_source = timeline.reference_year(tables, [i.mtime for i in items])
    tables = timeline.fix_years(tables, year)
    tables = _fill_attempts(tables)
    meter.status("building the models (collectives, NCCL, nodes, environment)")
    # Issue 8: NCCL kernels of nsys/Kineto timelines -> collectives rows and collective_timing.
    tables.update(collective_timing.build(tables))
    ranks = collective_timing.extend_ranks(ranks, tables)
    tables.update(nccl_model.build(tables, ranks))
    tables.update(nccl_errors.build(tables))    # issue 22: every error NCCL stated, with its cause
    tables.update(node_model.build(tables, ranks, parsed.inputs))  # issue 5: node evidence, GPU join, clocks
    tables.update(env_model.build(tables, parsed.lines, parsed.inputs))
    lines = _lines_table(parsed.lines, by_line)
    if lines["attempt"].n_unique() > 2:   # several attempts (and lines of none): place those by position
        lines = timeline.fill_attempts_by_position(lines, timeline.attempt_marks(tables))
    t_models = time.perf_counter()
    meter.status("writing the store")
    tables = {**tables, "inputs": parsed.inputs, "ranks": ranks, "lines": lines}
    con = sink.connection()     # the store the bulk was staged in, or a new one made alike
    files, folders = {}, []
    if spill and db_path is None:
        # A large run with no store file asked for: its tables as Parquet files, views of an
        # in-memory store (store.write_files); the cache entry copies the files.
        folders.append(store.private_dir() / f"tables-{uuid.uuid4().hex[:12]}")
        written, files = store.write_files(con, tables, folders[0])
    else:
        written = store.write_all(con, tables)
    derived, bulk_files = {}, {}
    if sink.rows:   # the COLL trace bulk and skimmed lines, shown by views of these tables
        derived, bulk_files = bulk.merge(con, sink if db_path is None else None)
    if bulk_files:  # views over the sink's files: they stay until the process ends
        store.allow(con, [*folders, sink.spool])
    else:
        sink.discard()
    meter.close()
    t_store = time.perf_counter()
    info.update(year=year, time_source=year_source,
                attempts=sorted(a for a in lines["attempt"].unique().to_list() if a is not None))
    run = Run(con, info, errors + _collapse_empty(parsed.messages), db_path=str(db_path) if db_path else None)
    # the tables as their own rows are (``lines``, and the tables bulk rows are added to, are read by query)
    kept = {name: frame for name, frame in written.items() if name not in derived}
    run.keep_written({name: frame for name, frame in kept.items() if name != "lines"})
    if files:   # the rest are read from their files, as on a cache hit (Run.kept)
        run.stored_frames = {name: files[name] for name in store.read_back_unchanged(con, kept)}
    later = []      # the entries written once the caller starts them (Run.start_cache)
    if saving is not None and saving.ident is None:
        later.append(saving)
    elif saving is not None:
        saving.join()
    if run_key:
        # what the store holds under each name: a table shown with bulk rows is ``_<table>``
        named = {name: f"_{name}" if name in derived else name for name in written}
        later.append(cache.save(run_key, con, {"info": run.info, "messages": run.messages},
                                background=background_cache, start=start_cache,
                                frames={named[name]: frame for name, frame in written.items()},
                                files={**{named[name]: [path] for name, path in files.items()}, **bulk_files},
                                derived=derived))
        run.cache_key = run_key
    run.pending_cache = _in_turn([thread for thread in later if thread is not None])
    run.timings = {"discover_s": round(t_discover - started, 3), "parse_s": round(t_parse - started, 3),
                   "models_s": round(t_models - t_parse, 3), "store_s": round(t_store - t_models, 3),
                   "total_ingest_s": round(time.perf_counter() - started, 3)}
    if tail_info:
        run.timings.update(cache="tails", **tail_info)
    return run


# A per-rank output file: torchrun's attempt_N/<local rank>/stdout.log and stderr.log, and the
# stdout/stderr files other launchers keep per rank. Empty ones are normal (a healthy rank writes
# nothing to stderr).
_PER_RANK_FILE = re.compile(r"(^|/)attempt_\d+/\d+/(stdout|stderr)\.log$|(^|/)(stdout|stderr)[^/]*$|"
                            r"(^|/)[^/]*rank[_-]?\d+[^/]*\.(err|out|log)$", re.I)


def _held_bytes(parsed) -> int:
    return parsed.lines.estimated_size() + sum(frame.estimated_size() for frame in parsed.tables.values())


def _in_turn(threads: list[threading.Thread]) -> threading.Thread | None:
    """One thread for several (each started and joined in turn when it is started), or the one."""
    if len(threads) <= 1:
        return threads[0] if threads else None

    def run_each() -> None:
        for thread in threads:
            if thread.ident is None:
                thread.start()
            thread.join()
    return threading.Thread(target=run_each, name="postmortem-cache-entries")


def _collapse_empty(messages: list[str], keep: int = 3) -> list[str]:
    """Empty per-rank files are normal: no message about them (``inputs`` lists each, and the
    report counts them once, ``inputs.totals.empty``). Other empty files are named, up to
    ``keep`` of them; more are one line."""
    empty = [m.removesuffix(": empty file") for m in messages if m.endswith(": empty file")]
    rest = [m for m in messages if not m.endswith(": empty file")]
    other = [path for path in empty if not _PER_RANK_FILE.search(path.rsplit("!/", 1)[-1])]
    if len(other) <= keep:
        return rest + [f"{path}: empty file" for path in other]
    return rest + [f"{len(other)} empty files (e.g. {other[0]}); listed in inputs"]


def _annotate(tables: dict[str, pl.DataFrame], by_line: ByLine) -> dict[str, pl.DataFrame]:
    out, orders, plans = {}, {}, {}
    for name, frame in tables.items():
        order = row_order(frame.columns)
        if order is None:
            out[name] = frame
            continue
        plan = frame.lazy()
        # Flight Recorder rows (postmortem.parsers.flight_recorder) state their own rank (from the dump's file
        # name; a dump has no lines to attribute): they keep it, every other row takes attribution's.
        own = [c for c in ("rank", "rank_source", "rank_confidence") if c in frame.columns] \
            if "parser" in frame.columns and (frame["parser"] == "flight_recorder").any() else []
        if own:
            fr = pl.col("parser") == "flight_recorder"
            plan = by_line.attached(plan, own, suffix="_attr").with_columns(
                [pl.when(fr).then(pl.col(c)).otherwise(pl.col(f"{c}_attr")).alias(c) for c in own]
            ).drop([f"{c}_attr" for c in own])
        extra = [c for c in by_line.rows.columns if c not in frame.columns]
        orders[name] = order   # a total order: each chunk's thread sorted most tables by it already
        plans[name] = by_line.attached(plan, extra)
    out.update(zip(plans, collect_each(list(plans.values()))))    # every table's in one call
    return _sorted({name: out[name] for name in tables}, orders)


def _sorted(tables: dict[str, pl.DataFrame], orders: dict[str, list[str]]) -> dict[str, pl.DataFrame]:
    """Each table of ``orders`` as ``sort(order, maintain_order=True)`` would give it, without
    moving a row of a table in that order already, as the chunks leave them (``ingest.row_order``;
    10,000 ranks: all 24): which are is asked of every table in one Polars call; a sort gathers
    every column (0.35 s for ``events``' 0.5 M rows of 55 columns)."""
    names = list(orders)
    in_order = lambda order: (pl.arg_sort_by(order, maintain_order=True) == pl.int_range(pl.len())).all()
    checks = collect_each([tables[name].lazy().select(in_order(orders[name])) for name in names])
    out = dict(tables)
    for name, check in zip(names, checks):
        if not check.item():
            frame = tables[name]
            out[name] = frame[frame.select(pl.arg_sort_by(orders[name], maintain_order=True)).to_series()]
    return out


_LINE_KEY = (pl.col("input_id").cast(pl.UInt64) * (1 << 32) + pl.col("line_no").cast(pl.UInt64)).alias("_key")


class ByLine:
    """Rows of a frame of one row per line (``attribution``) looked up by (input_id, line_no):
    a binary search in its sorted keys. A left join hashed all 1.6 M rows of a 10,000-rank run's
    attribution for each of its 23 tables, 0.1 s even for a table of one row."""

    def __init__(self, rows: pl.DataFrame) -> None:
        keys = rows.select(_LINE_KEY).to_series()
        self.unique = keys.n_unique() == len(keys)
        # attribution comes in line order: nothing to sort, and the lines table, the same lines
        # in that order, takes its columns as they are (``attach``)
        self.in_order = self.unique and not keys.has_nulls() and keys.is_sorted()
        if not self.in_order:
            rows = rows.sort("input_id", "line_no")
            keys = rows.select(_LINE_KEY).to_series()
        self.rows, self.keys = rows, keys

    def attach(self, frame: pl.DataFrame, columns: list[str], suffix: str = "") -> pl.DataFrame:
        """``frame`` with ``columns`` of its lines' rows (null where a line has none), each named
        with ``suffix`` where ``frame`` has that name already: a left join that keeps the order.
        A frame of the same lines in the same order (the lines table) takes the columns as they
        are: the search and gather took 0.14-0.70 s for the 10,000-rank run's 1.58 M lines, and
        this a third to a tenth of that in the same minutes."""
        names = {c: f"{c}{suffix}" if c in frame.columns else c for c in columns}
        if (self.in_order and frame.height == len(self.keys) and not set(names.values()) & set(frame.columns)
                and frame.select(_LINE_KEY).to_series().equals(self.keys)):
            # (a name the frame has already is left to the lookup, which replaces that column)
            return frame.hstack(self.rows.select([pl.col(c).alias(names[c]) for c in columns]))
        return self.attached(frame.lazy(), columns, suffix).collect(engine="in-memory")

    def attached(self, frame: pl.LazyFrame, columns: list[str], suffix: str = "") -> pl.LazyFrame:
        """``attach`` as a plan, to be run with others in one call (``collect_each``)."""
        have = frame.collect_schema().names()
        names = {c: f"{c}{suffix}" if c in have else c for c in columns}
        if not self.unique:   # a line of several rows: a join, which repeats the frame's row
            right = self.rows.lazy().select("input_id", "line_no", *columns).rename(names)
            return frame.join(right, on=["input_id", "line_no"], how="left", maintain_order="left")
        if self.rows.is_empty():
            return frame.with_columns([pl.lit(None, self.rows.schema[c]).alias(names[c]) for c in columns])
        keys = pl.lit(self.keys)
        at = pl.col("_at")
        found = keys.gather(at.clip(0, len(self.keys) - 1)) == _LINE_KEY
        index = pl.when(found).then(at)     # null: the line has no row
        return frame.with_columns(_at=keys.search_sorted(_LINE_KEY)).with_columns(
            [pl.lit(self.rows[c]).gather(index).alias(names[c]) for c in columns]).drop("_at")


def _fill_attempts(tables: dict[str, pl.DataFrame]) -> dict[str, pl.DataFrame]:
    seen = collect_each([frame.lazy().select(pl.col("attempt").unique()) for frame in tables.values()
                         if "attempt" in frame.columns])     # every table's in one call
    attempts = {a for found in seen for a in found["attempt"].to_list() if a is not None}
    only = next(iter(attempts)) if len(attempts) == 1 else (0 if not attempts else None)
    if only is not None:    # every row of the one attempt (or of none), in one Polars call
        names = [name for name, frame in tables.items() if "attempt" in frame.columns]
        filled = collect_each([tables[name].lazy().with_columns(attempt=pl.col("attempt").fill_null(only))
                               for name in names])
        return {**tables, **dict(zip(names, filled))}
    starts = timeline.attempt_starts(tables)
    tables = {name: timeline.fill_attempts(frame, starts) for name, frame in tables.items()}
    marks = timeline.attempt_marks(tables)
    return {name: timeline.fill_attempts_by_position(frame, marks) for name, frame in tables.items()}


def _lines_table(lines: pl.DataFrame, by_line: ByLine) -> pl.DataFrame:
    """The per-line index (understood NCCL INFO lines carry no text: ``postmortem.analyzer.ingest``
    dropped it, the store reads it back by offset)."""
    df = by_line.attach(lines, [c for c in by_line.rows.columns if c not in ("input_id", "line_no")], suffix="_attr")
    if df["attempt"].null_count() == len(df):
        df = df.with_columns(attempt=pl.lit(0, dtype=pl.Int64))
    return df.select([c for c in LINE_COLUMNS if c in df.columns])
