"""The timeline reader: what happened when, read from the store once, in one wording, for every
front end that draws time (the TUI's Timeline through ``postmortem.views.timeline_data``, the
HTML report's per-rank picture in ``postmortem.html_pictures``, the Perfetto export in
``postmortem.export.perfetto``) and the TUI's go-to keys (``Moments``).

One function per kind of row, each reading its table once:

* ``events`` (inits, warnings, errors, timeouts of the ranks), ``exits``, ``agent`` (torchrun)
  and ``slurm`` (the launcher and the scheduler), ``iterations``, ``progress`` (the c10d status
  lines: counters that moved, watchdog failures, dump signals), ``in_flight`` and
  ``progress_states`` (what the status lines say between two of them), ``collectives`` and
  ``collective_timing``, ``last_lines`` (each rank's latest timestamped row) and
  ``node_events`` (the kernel log);
* ``Entry`` is their row: the time as logged (``us``), rank, node, the mark kind (``KINDS``
  of the TUI's lanes: timeout, error, warning, init, ...), ``text`` (the one wording) and
  ``more`` (further facts that a wide view appends to it), and the log line it came from;
* for a trace, which draws slices and every row it can place, whole rows as Polars frames with
  ``t`` in epoch ns on the common clock: ``step_rows`` (with the previous step), ``progress_stretches``
  (counters that did not move, and the watchdog's lines), ``collective_lines``, ``flight_recorder``
  (created/completed), ``event_rows``, ``nccl_warn_rows``, ``exit_rows``, ``agent_rows``,
  ``slurm_rows``, ``job_spans``, ``node_event_rows``, ``kernel_rows`` and ``nvtx_rows``, with
  ``end_of_logs``, ``input_paths`` and ``job_id``.

The ``Entry`` readers take only rows with a time of their own; the frame readers borrow one
for the rest (``with_time``: the nearest earlier timed line of the same file). Clocks: ``Clock`` holds each node's offset from ``node_clocks`` (node clock
minus the reference); ``node_events`` are on the logs' common clock (``ts_utc``, or a bare
``ts`` less the node's offset), every other row keeps its time as logged, and a front end that
draws ranks of several nodes on one axis takes the offset off (``Clock.us``).

Every query tolerates a store without the table or with older columns (a missing column reads
as NULL); ``Store(con, quiet=True)`` also turns a failing query into no rows, so that a picture
never costs the report.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from functools import lru_cache

import polars as pl

from postmortem.analyzer.store import STORE_COLUMNS

EPOCH = datetime(1970, 1, 1)

# ``events`` kinds that are no mark (periodic status lines live in ``progress``; frames belong to
# their exception).
_NOISE = ("work_update", "service_thread", "traceback", "cpp_frames", "fr_trace_detail", "launch_config")
# start-up banners: the process (group) starting, whatever their level
_BANNERS = ("pg_options", "env_banner", "megatron_startup")
_BANNER = re.compile(rf"^({'|'.join(_BANNERS)})$")
_INIT = re.compile(r"(^|_)(init|startup|process_start|worker_start)($|_)")
_TIMEOUT = re.compile(r"timeout|pg_status|watchdog")
_ERROR = re.compile(r"exception|error|terminate|fault|oom|signal|abort|killed|fail|teardown|nan")
_WARNING = re.compile(r"warn|desync|mismatch|dump|heartbeat|retry|slow")
_ERROR_LEVELS = ("E", "ERROR", "F", "FATAL", "CRITICAL")
_WARNING_LEVELS = ("W", "WARN", "WARNING")
# launcher and scheduler lines that report a failure
_JOB_FAILURE = re.compile(r"cancel|abort|fail|timeout|kill|oom|signal|error")

# kernel-log rows that are context (identities, banners, detail lines), not events
_NODE_CONTEXT = ("gpu_identity", "nvrm_driver", "aer_detail", "hung_task_detail", "oom_constraint", "oom_reaped",
                 "nfs_ok")
# node events worth a labelled line across the HTML picture
NODE_MAJOR = re.compile(r"^(xid|link_down|oom_kill|hung_task|nic_health|mce)$")

# the tables whose rows are a rank's log lines (its last line is the latest of them)
_LAST_TABLES = ("events", "progress", "iterations", "collectives", "agent")


# --- the store ---------------------------------------------------------------------------------

class Store:
    """A DuckDB connection (or cursor) with the store's columns and their types, read once."""

    def __init__(self, con, quiet: bool = False):
        self.con, self.quiet = con, quiet
        self.have: dict[str, dict[str, str]] = {}
        for table, column, dtype in self.rows(STORE_COLUMNS):
            self.have.setdefault(table, {})[column] = dtype

    def columns(self, table: str) -> dict[str, str]:
        return self.have.get(table, {})

    def timed(self, table: str, column: str = "ts") -> bool:
        return self.columns(table).get(column, "").upper().startswith("TIMESTAMP")

    def col(self, table: str, name: str, cast: str = "") -> str:
        """The column, or a typed NULL where this store's table lacks it."""
        if name in self.columns(table):
            return f'"{name}"' + (f"::{cast}" if cast else "")
        return f"NULL::{cast or 'VARCHAR'}"

    def base(self, table: str) -> str:
        """rank, node, input_id, line_no of a table's rows."""
        c = lambda name, cast="": self.col(table, name, cast)  # noqa: E731
        return (f"{c('rank', 'BIGINT')} AS rank, {c('node')} AS node, {c('input_id', 'BIGINT')} AS input_id, "
                f"{c('line_no', 'BIGINT')} AS line_no")

    def rows(self, sql: str, params: list | None = None) -> list[tuple]:
        try:
            return self.con.execute(sql, params or []).fetchall()
        except Exception:  # noqa: BLE001 -- quiet: a picture must never cost the report
            if self.quiet:
                return []
            raise

    def frame(self, sql: str, params: list | None = None) -> pl.DataFrame:
        try:
            return self.con.sql(sql, params=params or None).pl()
        except Exception:  # noqa: BLE001 -- quiet: a picture must never cost the report
            if self.quiet:
                return pl.DataFrame()
            raise


def store_of(source, quiet: bool = False) -> Store:
    """A ``Store`` from a ``Store``, a ``Run`` (``.con``) or a DuckDB connection."""
    if isinstance(source, Store):
        return source
    return Store(getattr(source, "con", source), quiet)


# --- the clock ---------------------------------------------------------------------------------

class Clock:
    """Each node's clock offset from ``node_clocks`` (node clock minus the reference; subtract it),
    in whole microseconds."""

    def __init__(self, store: Store):
        self.offset_us: dict[str, int] = {}
        if "offset_s" in store.columns("node_clocks"):
            for node, off in store.rows("SELECT node, offset_s FROM node_clocks WHERE offset_s IS NOT NULL "
                                        "AND node IS NOT NULL"):
                self.offset_us[node] = round(float(off) * 1e6)

    def us(self, us: int, node: str | None) -> int:
        """A time as logged on ``node`` (epoch µs) on the common clock."""
        return us - self.offset_us.get(node, 0) if node is not None else us

    def expr(self, ts: str = "ts", node: str = "node") -> pl.Expr:
        """Polars: epoch ns of ``ts`` on the common clock (``node``'s offset taken off)."""
        offset_ns = {n: off * 1000 for n, off in self.offset_us.items()}
        off = pl.col(node).replace_strict(offset_ns, default=0, return_dtype=pl.Int64) if offset_ns \
            else pl.lit(0, dtype=pl.Int64)
        return pl.col(ts).cast(pl.Datetime("ns")).dt.epoch("ns") - off


def wall(us: int) -> datetime:
    """Epoch µs as a naive datetime (the store's times are naive)."""
    return EPOCH + timedelta(microseconds=us)


# --- the rows ----------------------------------------------------------------------------------

class Entry:
    """One timestamped row: ``us`` its time as logged (epoch µs; node events: on the common clock),
    ``kind`` its mark kind, ``text`` the one wording, ``more`` further facts for a wide view
    (starts with its own separator, may be empty), and the log line it came from."""

    __slots__ = ("us", "rank", "node", "kind", "text", "more", "input_id", "line_no", "source")

    def __init__(self, us, rank, node, kind, text, input_id=None, line_no=None, more="", source=""):
        self.us, self.rank, self.node, self.kind, self.text = us, rank, node, kind, text
        self.input_id, self.line_no, self.more, self.source = input_id, line_no, more, source

    @property
    def ts(self) -> datetime:
        return wall(self.us)

    @property
    def line(self) -> tuple[int, int] | None:
        """(input_id, line_no) where the row has both (the TUI opens it)."""
        return (self.input_id, self.line_no) if self.input_id is not None and self.line_no is not None else None

    @property
    def full_text(self) -> str:
        return self.text + self.more

    def __repr__(self) -> str:
        return f"Entry({self.ts}, {self.kind!r}, rank={self.rank}, node={self.node!r}, {self.text!r})"


# --- wording -----------------------------------------------------------------------------------

def words(kind: str | None, default: str) -> str:
    return (kind or default).replace("_", " ")


def pg_name(pg_desc, pg_id) -> str:
    """A process group's name: its description, else its id."""
    if pg_desc:
        return str(pg_desc)
    return f"PG {pg_id}" if pg_id is not None else "PG not named on the line"


def pg_sql(store: Store, table: str) -> str:
    """``pg_name`` in SQL (``||`` is NULL when the id is: DuckDB's concat would give 'PG ')."""
    return (f"coalesce({store.col(table, 'pg_desc')}, 'PG ' || {store.col(table, 'pg_id', 'VARCHAR')}, "
            f"'PG not named on the line')")


def watchdog_failure_text(pg: str, failing_seq) -> str:
    return f"{pg}: watchdog failure at #{failing_seq if failing_seq is not None else '?'}"


def dump_signal_text(pg: str, detector_rank) -> str:
    """c10d names the rank whose timeout raised the signal, or says "this local rank"."""
    return f"{pg}: dump signal from {f'rank {detector_rank}' if detector_rank is not None else 'this rank'}"


def node_event_text(kind, code, meaning, device) -> str:
    name = "Xid " + str(code) if kind == "xid" else words(kind, "kernel event")
    return name + (f" ({meaning})" if meaning else "") + (f" {device}" if device else "")


def node_context_sql() -> str:
    """The kernel-log kinds that are context, not events, as an SQL list."""
    return ", ".join(f"'{k}'" for k in _NODE_CONTEXT)


@lru_cache(maxsize=4096)   # a run has a few dozen (kind, level) pairs and 10,000 ranks 126,677 rows
def event_kind(kind: str | None, level: str | None) -> str:
    """The mark kind of an ``events`` row, from its kind and level: a failure wins over the
    start-up words (``init_failed`` is an error)."""
    kind, level = (kind or "").lower(), (level or "").upper()
    if _BANNER.search(kind):
        return "init"
    if _TIMEOUT.search(kind):
        return "timeout"
    if _ERROR.search(kind) or level in _ERROR_LEVELS:
        return "error"
    if _WARNING.search(kind) or level in _WARNING_LEVELS:
        return "warning"
    if _INIT.search(kind):
        return "init"
    return "event"


# --- the readers -------------------------------------------------------------------------------

def rank_nodes(store: Store) -> tuple[dict[int, str | None], dict[int, int]]:
    """Each rank's node and, where known, its GPU (``cuda_dev``), in rank order."""
    if "rank" not in store.columns("ranks"):
        return {}, {}
    rank_node, gpu_of = {}, {}
    for rank, node, dev in store.rows(f"SELECT rank, {store.col('ranks', 'node')}, "
                                      f"{store.col('ranks', 'cuda_dev', 'BIGINT')} FROM ranks "
                                      "WHERE rank IS NOT NULL ORDER BY rank"):
        rank_node[int(rank)] = node
        if dev is not None:
            gpu_of[int(rank)] = int(dev)
    return rank_node, gpu_of


def events(store: Store, kinds: tuple[str, ...] | None = None) -> list[Entry]:
    """``events`` rows but noise; ``source`` is "repeated" where the same line is a row of
    ``collectives`` or ``progress`` too (a view that reads those skips it). ``kinds``: only rows
    of these mark kinds (``event_kind``)."""
    if not store.timed("events"):
        return []
    c = lambda name, cast="": store.col("events", name, cast)  # noqa: E731
    noise = ", ".join(f"'{k}'" for k in _NOISE)
    repeated = []
    for table in ("collectives", "progress"):
        if {"input_id", "line_no"} <= set(store.columns(table)) and {"input_id", "line_no"} <= set(store.columns("events")):
            repeated.append(f"EXISTS (SELECT 1 FROM {table} x WHERE x.input_id = e.input_id AND x.line_no = e.line_no)")
    sql = (f"SELECT {store.base('events')}, epoch_us(ts), {c('kind')}, {c('level')}, "
           f"coalesce({c('message')}, {c('detail')}, {c('kind')}), {' OR '.join(repeated) or 'FALSE'} "
           # the stored order: row_number() OVER () keeps it (DuckDB's order preservation), where
           # ``rowid`` is a table's alone (a cache hit's tables are views: analyzer.cache)
           f"FROM (SELECT *, row_number() OVER () AS _position FROM events) e "
           f"WHERE ts IS NOT NULL AND coalesce({c('kind')}, '') NOT IN ({noise}) ORDER BY e._position")
    out = []
    for r, n, i, ln, us, kind, level, text, rep in store.rows(sql):
        mark = event_kind(kind, level)
        if kinds is None or mark in kinds:
            out.append(Entry(us, r, n, mark, f"{kind}: {text}", i, ln, source="repeated" if rep else ""))
    return out


def exits(store: Store) -> list[Entry]:
    """Process exits with a time: an error where the code is not 0."""
    if not store.timed("exits", "time"):
        return []
    c = lambda name, cast="": store.col("exits", name, cast)  # noqa: E731
    sql = (f"SELECT {store.base('exits')}, epoch_us(time), {c('exitcode', 'BIGINT')}, {c('signal')}, "
           f"{c('root_cause', 'BOOLEAN')} FROM exits WHERE time IS NOT NULL")
    return [Entry(us, r, n, "error" if code not in (None, 0) else "event",
                  f"process exit code {code}" + (f" ({sig})" if sig else ""), i, ln,
                  more=", root cause" if root else "")
            for r, n, i, ln, us, code, sig, root in store.rows(sql)]


def _pid_ranks(store: Store) -> dict[int, int]:
    if not {"pid", "rank"} <= set(store.columns("ranks")):
        return {}
    return dict(store.rows("SELECT pid, min(rank) FROM ranks WHERE pid IS NOT NULL GROUP BY pid"))


def agent(store: Store) -> list[Entry]:
    """torchrun's lines, on the rank whose worker pid they name (``source`` "worker"), else on
    their node: a failure is an error, workers being closed a warning (a consequence, not the
    fault), the start an init. ``source`` "failure" where the line reports a failure."""
    if not store.timed("agent"):
        return []
    c = lambda name, cast="": store.col("agent", name, cast)  # noqa: E731
    sql = (f"SELECT {store.base('agent')}, epoch_us(ts), {c('kind')}, {c('signal')}, {c('exitcode', 'BIGINT')}, "
           f"{c('pid', 'BIGINT')} FROM agent WHERE ts IS NOT NULL AND coalesce({c('kind')}, '') <> 'launch_config'")
    pid_rank = _pid_ranks(store)
    out = []
    for r, n, i, ln, us, kind, sig, code, pid in store.rows(sql):
        kind = (kind or "").lower()
        text = f"torchrun: {words(kind, 'agent')}" + (f" ({sig})" if sig else "")
        more = "".join(b for b in (f", exit {code}" if code is not None else "",
                                   f", pid {pid}" if pid is not None else ""))
        if _BANNER.search(kind) or _INIT.search(kind):
            mk = "init"
        elif "closing" in kind:
            mk = "warning"
        else:
            mk = "error" if (sig or code not in (None, 0)) else "event"
        worker = pid_rank.get(pid) if pid is not None else None
        failure = bool(_JOB_FAILURE.search(kind) or sig)
        out.append(Entry(us, worker if worker is not None else r, n, mk, text, i, ln, more,
                         "failure" if failure else ""))
    return out


def slurm(store: Store) -> list[Entry]:
    """The scheduler's lines: an error where one reports a failure (``source`` "failure")."""
    if not store.timed("slurm"):
        return []
    c = lambda name, cast="": store.col("slurm", name, cast)  # noqa: E731
    sql = (f"SELECT {store.base('slurm')}, epoch_us(ts), {c('kind')}, {c('reason')}, {c('job_id')} "
           f"FROM slurm WHERE ts IS NOT NULL")
    out = []
    for r, n, i, ln, us, kind, reason, job in store.rows(sql):
        kind = (kind or "").lower()
        failure = bool(_JOB_FAILURE.search(kind))
        text = f"slurm: {words(kind, 'slurm')}" + (f" ({reason})" if reason else "")
        out.append(Entry(us, r, n, "error" if failure else "event", text, i, ln,
                         f", job {job}" if job else "", "failure" if failure else ""))
    return out


def iterations(store: Store) -> list[Entry]:
    """Logged training (and validation) steps, with loss, grad norm and step time."""
    if not store.timed("iterations"):
        return []
    c = lambda name, cast="": store.col("iterations", name, cast)  # noqa: E731
    sql = (f"SELECT {store.base('iterations')}, epoch_us(ts) AS us, "
           f"concat('iteration ', coalesce({c('iteration', 'VARCHAR')}, '?'), "
           f"CASE WHEN {c('validation', 'BOOLEAN')} THEN ' (validation)' ELSE '' END, "
           f"CASE WHEN {c('lm_loss', 'DOUBLE')} IS NOT NULL THEN concat(', loss ', round({c('lm_loss', 'DOUBLE')}, 4)) ELSE '' END, "
           f"CASE WHEN {c('grad_norm', 'DOUBLE')} IS NOT NULL THEN concat(', grad norm ', round({c('grad_norm', 'DOUBLE')}, 3)) ELSE '' END, "
           f"CASE WHEN {c('elapsed_ms', 'DOUBLE')} IS NOT NULL THEN concat(', ', round({c('elapsed_ms', 'DOUBLE')} / 1000, 2), ' s/step') ELSE '' END) "
           f"FROM iterations WHERE ts IS NOT NULL")
    return [Entry(us, r, n, "iteration", text, i, ln) for r, n, i, ln, us, text in store.rows(sql)]


def steps_times(store: Store) -> list[tuple[datetime, int | None]]:
    """(time, iteration) of the training steps (not validation), in time order."""
    if not store.timed("iterations"):
        return []
    c = lambda name, cast="": store.col("iterations", name, cast)  # noqa: E731
    return store.rows(f"SELECT DISTINCT ts, {c('iteration', 'BIGINT')} AS it FROM iterations WHERE ts IS NOT NULL "
                      f"AND NOT coalesce({c('validation', 'BOOLEAN')}, false) ORDER BY ts, it")   # a tie (two steps logged in one second): the same picture every run


def progress(store: Store) -> list[Entry]:
    """The c10d status lines where a rank's counters of a process group moved (or its first
    line), and the watchdog's failure and dump-signal lines; unchanged periodic lines only count
    for the last line."""
    if not store.timed("progress") or not {"last_enqueued", "last_completed"} <= set(store.columns("progress")):
        return []
    c = lambda name, cast="": store.col("progress", name, cast)  # noqa: E731
    sql = f"""
        WITH p AS (
            SELECT {store.base('progress')}, ts, {c('kind')} AS kind, {pg_sql(store, 'progress')} AS pg,
                   last_enqueued AS enq, last_completed AS comp, {c('failing_seq', 'BIGINT')} AS failing,
                   {c('detector_rank', 'BIGINT')} AS detector,
                   lag(last_enqueued) OVER w AS prev_enq, lag(last_completed) OVER w AS prev_comp
            FROM progress WHERE ts IS NOT NULL
            WINDOW w AS (PARTITION BY {c('rank')}, {c('node')}, {c('attempt')}, pg ORDER BY ts, {c('line_no')}))
        SELECT rank, node, input_id, line_no, epoch_us(ts), kind, pg, enq, comp, failing, detector FROM p
        WHERE kind IN ('pg_status', 'dump_signal') OR prev_enq IS NULL
           OR prev_enq IS DISTINCT FROM enq OR prev_comp IS DISTINCT FROM comp"""
    out = []
    for r, n, i, ln, us, kind, pg, enq, comp, failing, detector in store.rows(sql):
        if kind == "pg_status":
            mk, text = "timeout", watchdog_failure_text(pg, failing)
        elif kind == "dump_signal":
            mk, text = "warning", dump_signal_text(pg, detector)
        else:
            mk = "collective"
            state = (f"waiting in #{comp + 1}" if enq is not None and comp is not None and enq > comp
                     else "nothing in flight")
            text = f"{pg}: last enqueued #{enq}, last completed #{comp} ({state})"
        out.append(Entry(us, r, n, mk, text, i, ln))
    return out


def in_flight(store: Store) -> list[tuple]:
    """(rank, node, start_us, end_us) as logged where a process group of the rank had work
    enqueued but not completed: from one c10d status line to the next of the same group (the
    state holds between lines)."""
    cols = store.columns("progress")
    if not store.timed("progress") or not {"last_enqueued", "last_completed", "rank"} <= set(cols):
        return []
    c = lambda name, cast="": store.col("progress", name, cast)  # noqa: E731
    return store.rows(f"""
        SELECT rank, node, us, coalesce(next_us, us) FROM (
            SELECT rank, {c('node')} AS node, epoch_us(ts) AS us, last_enqueued > last_completed AS busy,
                   lead(epoch_us(ts)) OVER (PARTITION BY rank, {c('node')}, {c('attempt')}, {pg_sql(store, 'progress')}
                                            ORDER BY ts, {c('line_no')}) AS next_us
            FROM progress WHERE ts IS NOT NULL AND rank IS NOT NULL)
        WHERE busy""")


def progress_states(store: Store, ranks: list[int], lo: datetime, hi: datetime) -> list[tuple]:
    """(rank, t0, t1, state) between two c10d status lines of one process group of these ranks
    that overlap [lo, hi] (times as logged): 3 the completed counter moved, 2 it did not and
    work was in flight, 1 nothing in flight."""
    if not ranks or not store.timed("progress") or \
            not {"rank", "last_enqueued", "last_completed"} <= set(store.columns("progress")):
        return []
    return store.rows(f"""
        SELECT rank, t0, t1, CASE WHEN comp > prev_comp THEN 3 WHEN enq > comp THEN 2 ELSE 1 END AS state FROM (
            SELECT rank, ts AS t1, last_enqueued AS enq, last_completed AS comp,
                   lag(ts) OVER w AS t0, lag(last_completed) OVER w AS prev_comp
            FROM progress WHERE ts IS NOT NULL AND list_contains(?, rank)
                AND ts BETWEEN ?::TIMESTAMP - INTERVAL 2 HOUR AND ?::TIMESTAMP + INTERVAL 2 HOUR
            WINDOW w AS (PARTITION BY rank, {pg_sql(store, 'progress')} ORDER BY ts))
        WHERE t0 IS NOT NULL AND t1 >= ?::TIMESTAMP AND t0 <= ?::TIMESTAMP""", [ranks, lo, hi, lo, hi])


def last_advance(store: Store, until: datetime) -> datetime | None:
    """The last c10d status line, at or before ``until``, whose completed counter had moved since
    the line before it (of the same rank and process group)."""
    if not store.timed("progress") or not {"rank", "last_completed"} <= set(store.columns("progress")):
        return None
    # per group, the first line that shows its final completed count (counters only grow): one
    # aggregate, not a window over what can be millions of status lines
    rows = store.rows(f"""
        SELECT max(t) AS t FROM (
            SELECT arg_min(ts, struct_pack(c := -last_completed, ts := ts)) AS t,
                   min(last_completed) < max(last_completed) AS moved
            FROM progress WHERE ts IS NOT NULL AND last_completed IS NOT NULL AND ts <= ?::TIMESTAMP
            GROUP BY rank, {pg_sql(store, 'progress')}) WHERE moved""", [until])
    return rows[0][0] if rows else None


def collectives(store: Store) -> list[Entry]:
    """Watchdog timeouts, Flight Recorder entries and NCCL COLL lines, where the table has a time
    (profiler kernels are not collectives of the log)."""
    cols = store.columns("collectives")
    clocks = [c for c in ("ts", "time_started", "time_created", "time_completed")
              if cols.get(c, "").upper().startswith("TIMESTAMP")]
    if not clocks:
        return []
    c = lambda name, cast="": store.col("collectives", name, cast)  # noqa: E731
    when = "coalesce(" + ", ".join(clocks) + ")"
    sql = (f"SELECT {store.base('collectives')}, epoch_us({when}), {c('kind')}, {c('op')}, {c('seq', 'BIGINT')}, "
           f"{pg_sql(store, 'collectives')}, {c('state')}, {c('ran_for_ms', 'DOUBLE')} "
           f"FROM collectives WHERE {when} IS NOT NULL "
           f"AND coalesce({c('kind')}, '') NOT IN ('nsys_kernel', 'kineto_kernel', 'profile_kernel')")
    out = []
    for r, n, i, ln, us, kind, op, seq, pg, state, ran in store.rows(sql):
        kind = kind or "collective"
        bits = [kind.replace("_", " "), (op or "").upper(), f"#{seq}" if seq is not None else "", f"on {pg}",
                f"({state})" if state else "", f"ran for {ran / 1000:g} s" if ran is not None else ""]
        out.append(Entry(us, r, n, "timeout" if "timeout" in kind else "collective", " ".join(b for b in bits if b),
                         i, ln))
    return out


def collective_timing(store: Store) -> list[Entry]:
    """Profiler collectives (nsys, Kineto): arrival skew and bus bandwidth per rank."""
    if not store.timed("collective_timing", "start"):
        return []
    c = lambda name, cast="": store.col("collective_timing", name, cast)  # noqa: E731
    sql = (f"SELECT {c('rank', 'BIGINT')}, epoch_us(start), {c('op')}, {c('coll_index', 'BIGINT')}, {c('pg')}, "
           f"{c('skew_ns', 'BIGINT')}, {c('busbw_gbyte_s', 'DOUBLE')}, {c('input_id', 'BIGINT')}, {c('source')} "
           f"FROM collective_timing WHERE start IS NOT NULL")
    out = []
    for r, us, op, idx, pg, skew, busbw, i, src in store.rows(sql):
        bits = [f"profile {(op or '?')} #{idx}", f"on {pg}" if pg else "",
                f"arrived {skew / 1e6:.3g} ms after the first" if skew is not None else "",
                f"busbw {busbw:.3g} GB/s" if busbw is not None else "", f"({src})" if src else ""]
        out.append(Entry(us, r, None, "collective", " ".join(b for b in bits if b), i, None))
    return out


def last_lines(store: Store) -> list[Entry]:
    """Each rank's latest timestamped row of its log tables; ``more`` is the text of that line."""
    parts = [f"SELECT rank::BIGINT AS rank, {store.col(t, 'node')} AS node, ts, "
             f"{store.col(t, 'input_id', 'BIGINT')} AS input_id, {store.col(t, 'line_no', 'BIGINT')} AS line_no "
             f"FROM {t} WHERE ts IS NOT NULL AND rank IS NOT NULL"
             for t in _LAST_TABLES if store.timed(t) and "rank" in store.columns(t)]
    if not parts:
        return []
    stored = {"text", "input_id", "line_no"} <= set(store.columns("lines"))
    text = "l.text" if stored else "NULL"
    join = "LEFT JOIN lines l USING (input_id, line_no)" if stored else ""
    # Each rank's latest row by (ts, input_id, line_no), a missing input or line first: one
    # arg_max per rank, not a sort of every row (the 1,024-rank run's 400,000 rows: 0.21 -> 0.07 s).
    # Rows with the same key are one line of two tables (an event that is a status line too).
    sql = f"""
        WITH a AS ({' UNION ALL '.join(parts)}),
        b AS (SELECT rank, arg_max(node, k) AS node, max(k) AS k FROM (
                  SELECT rank, node, (ts, coalesce(input_id, -1), coalesce(line_no, -1)) AS k FROM a) GROUP BY rank),
        c AS (SELECT rank, node, k[1] AS ts, nullif(k[2], -1) AS input_id, nullif(k[3], -1) AS line_no FROM b)
        SELECT c.rank, c.node, epoch_us(c.ts), {text}, c.input_id, c.line_no FROM c {join} ORDER BY c.rank"""
    return [Entry(us, r, n, "last", "its last timestamped line", i, ln,
                  ": " + (t if t is not None else "(text not stored)"))
            for r, n, us, t, i, ln in store.rows(sql)]


def node_events(store: Store, clock: Clock | None = None) -> list[Entry]:
    """Kernel-log events with a time, on the logs' common clock (``ts_utc`` already is; a bare
    ``ts`` less the node's offset); context rows left out. ``kind`` is the event's own kind
    (xid, link_down, ...); the rank is the one of the GPU it names, or of the process it names
    (the OOM killer's victim); ``more`` is the kernel's message."""
    cols = store.columns("node_events")
    clocks = [c for c in ("ts_utc", "ts") if store.timed("node_events", c)]
    if not clocks:
        return []
    clock = clock or Clock(store)
    c = lambda name, cast="": store.col("node_events", name, cast)  # noqa: E731
    skip = node_context_sql()
    when = f"coalesce({', '.join(clocks)})"
    utc = "ts_utc IS NOT NULL" if "ts_utc" in clocks else "FALSE"
    sql = (f"SELECT {c('global_rank', 'BIGINT')}, coalesce({c('node')}, {c('host')}), epoch_us({when}), {utc}, "
           f"{c('kind')}, {c('code')}, {c('meaning')}, {c('device')}, {c('pid', 'BIGINT')}, {c('message')}, "
           f"{c('input_id', 'BIGINT')}, {c('line_no', 'BIGINT')} FROM node_events "
           f"WHERE {when} IS NOT NULL AND coalesce({c('kind')}, '') NOT IN ({skip})")
    by_pid = {}
    if {"pid", "node", "rank"} <= set(store.columns("ranks")) and "pid" in cols:
        by_pid = {(n, p): r for r, n, p in store.rows("SELECT rank, node, pid FROM ranks WHERE pid IS NOT NULL "
                                                        "AND rank IS NOT NULL")}
    out = []
    for r, n, us, is_utc, kind, code, meaning, device, pid, message, i, ln in store.rows(sql):
        if r is None and pid is not None:
            r = by_pid.get((n, pid))
        out.append(Entry(us if is_utc else clock.us(us, n), r, n, kind or "node",
                         node_event_text(kind, code, meaning, device), i, ln, f": {message}" if message else ""))
    return out


# --- the moments -------------------------------------------------------------------------------

def failure_marks(store: Store) -> list[Entry]:
    """What the HTML picture marks and ``Moments`` looks through: the ranks' timeouts, errors and
    warnings (``events``: banners and inits are no mark; ``exits`` that are not 0), the launcher's
    and the scheduler's failures (kind "job", on no rank), every rank's last line."""
    out = events(store, kinds=("timeout", "error", "warning"))
    out += [m for m in exits(store) if m.kind == "error"]
    out += [Entry(m.us, None, m.node, "job", m.text, source=m.source)
            for m in agent(store) + slurm(store) if m.source == "failure"]
    return out + last_lines(store)


def first_mark(marks: list[Entry], kinds: tuple[str, ...]) -> Entry | None:
    found = [m for m in marks if m.kind in kinds]
    return min(found, key=lambda m: (m.us, m.rank if m.rank is not None else -1)) if found else None


class Moments:
    """The times the HTML report's per-rank picture centres on, also the TUI's go-to keys
    (Timeline and Logs): ``first_failure``, the first timeout or error of a rank (an ``Entry``, or
    None); ``hang_start``, the last sign of progress before the job stood still (None when it did
    not: no stall longer than two minutes or three steps before the first failure or the end of
    the logs); ``last_step`` (time, iteration) at or before then; ``last_advance``, the last c10d
    status line whose completed counter had moved; ``step_s``, the median step time; ``end`` and
    ``first_log``, the logs' bounds."""

    def __init__(self, first_failure, hang_start, last_step, last_advance, step_s, end, first_log):
        self.first_failure, self.hang_start, self.last_step = first_failure, hang_start, last_step
        self.last_advance, self.step_s, self.end, self.first_log = last_advance, step_s, end, first_log

    @property
    def anchor(self) -> datetime:
        """Where the picture centres: the hang's start, else the first failure, else the last step."""
        fail_ts = self.first_failure.ts if self.first_failure else None
        return self.hang_start or fail_ts or (self.last_step[0] if self.last_step else self.end)


def moments(source, marks: list[Entry] | None = None, steps: list | None = None) -> Moments | None:
    """The run's ``Moments`` (None when nothing has a time); ``source`` a ``Run`` (the logs'
    bounds come from ``postmortem.analyzer.timeline``); ``marks`` and ``steps`` when the caller
    has read them already (``failure_marks``, ``steps_times``)."""
    from postmortem.analyzer.timeline import log_bounds

    store = store_of(source, quiet=True)
    marks = failure_marks(store) if marks is None else marks
    steps = steps_times(store) if steps is None else steps
    if not marks and not steps:
        return None
    first_info, end_info = log_bounds(source)
    end = end_info["ts"] if end_info else max([m.ts for m in marks] + [t for t, _ in steps])
    first_fail = first_mark(marks, ("timeout", "error"))
    step_times = [t for t, _ in steps]
    step_s = None
    if len(step_times) >= 3:
        gaps = sorted((b - a).total_seconds() for a, b in zip(step_times, step_times[1:]))
        step_s = gaps[len(gaps) // 2] or None
    until = first_fail.ts if first_fail else end
    before = [s for s in steps if s[0] <= until]
    last_step = before[-1] if before else None
    # the hang began when the last sign of progress was seen: the last step, or later the last
    # status line whose completed counter had moved (steps are logged every minute or two)
    moved = last_advance(store, until)
    start = max([t for t in (last_step[0] if last_step else None, moved) if t is not None], default=None)
    stall = (until - start).total_seconds() if start else 0.0
    hung = start is not None and stall > max(120.0, 3 * (step_s or 0))
    return Moments(first_fail, start if hung else None, last_step, moved, step_s, end,
                   first_info["ts"] if first_info else None)


# --- frames: rows with their fields, for a trace (the Perfetto export) -------------------------
#
# A trace draws slices (start and end) and every row it can place, so these readers give whole
# rows as Polars frames: ``t`` is epoch ns on the common clock (``Clock.expr``), and a row of a
# log line without a time of its own borrows the time of the nearest earlier timed line of the
# same file (``t_inferred``: that line's number; ``with_time``).

# ``events`` kinds a trace leaves out: periodic status lines (``progress`` has them), frames of an
# exception, start-up chatter.
TRACE_NOISE = _NOISE + _BANNERS   # the trace has no init lane: start-up banners are noise there too
# the tables whose rows are timed log lines (a time to borrow, the end of the logs)
_TIMED_LOG_TABLES = ("events", "progress", "agent", "iterations", "collectives", "slurm")
_PROFILE_KINDS = ("nsys_kernel", "kineto_kernel", "profile_kernel")
_TIMEOUT_KINDS = ("watchdog_timeout", "blocking_wait_timeout")


def epoch_ns(value: datetime) -> int:
    """A datetime (naive: as stored; aware: taken to UTC) as epoch ns."""
    if value.tzinfo is not None:
        value = value.replace(tzinfo=None) - (value.utcoffset() or timedelta(0))
    delta = value - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1000


def select(store: Store, table: str, wanted: list[str], where: str = "") -> pl.DataFrame | None:
    """The wanted columns of a table (missing ones as NULL); None without the table."""
    have = store.columns(table)
    if not have:
        return None
    cols = ", ".join(f'"{c}"' if c in have else f'NULL AS "{c}"' for c in wanted)
    return store.frame(f'SELECT {cols} FROM "{table}"' + (f" WHERE {where}" if where else ""))


def job_id(store: Store) -> str | None:
    """The job's id: the scheduler's record of the whole job, else of any step, else the Slurm
    lines' (the most frequent; ties by id)."""
    queries = []
    if "job_id" in store.columns("job"):
        if "step" in store.columns("job"):
            queries.append("SELECT job_id, count(*) AS n FROM job WHERE job_id IS NOT NULL AND step IS NULL "
                           "GROUP BY job_id ORDER BY n DESC, job_id LIMIT 1")
        queries.append("SELECT job_id, count(*) AS n FROM job WHERE job_id IS NOT NULL GROUP BY job_id "
                       "ORDER BY n DESC, job_id LIMIT 1")
    if "job_id" in store.columns("slurm"):
        queries.append("SELECT job_id, count(*) AS n FROM slurm WHERE job_id IS NOT NULL GROUP BY job_id "
                       "ORDER BY n DESC, job_id LIMIT 1")
    for sql in queries:
        rows = store.rows(sql)
        if rows:
            return str(rows[0][0])
    return None


def input_paths(store: Store) -> dict[int, str]:
    """Each input's path, by input_id."""
    return dict(store.rows("SELECT input_id, path FROM inputs")) if store.columns("inputs") else {}


def end_of_logs(store: Store, clock: Clock) -> int | None:
    """The latest time of the job's own logs (rank logs, launcher, scheduler, profiles), epoch ns on
    the common clock. Node kernel logs count only when nothing else has a time (a journal may run
    for days)."""
    best = None
    for table in _TIMED_LOG_TABLES + ("exits",):
        tcol = "time" if table == "exits" else "ts"
        if store.columns(table).get(tcol, "").upper() != "TIMESTAMP":
            continue
        node = '"node"' if "node" in store.columns(table) else "NULL"
        df = store.frame(f'SELECT {node} AS node, max("{tcol}") AS ts FROM "{table}" WHERE "{tcol}" IS NOT NULL '
                         f"GROUP BY ALL")
        if not df.is_empty():
            v = df.select(clock.expr().max()).item()
            best = v if best is None or (v is not None and v > best) else best
    for table in ("kernels", "nvtx"):
        if "end" in store.columns(table):
            v = store.rows(f'SELECT epoch_ns(max("end")) FROM "{table}"')[0][0]
            if v is not None:
                best = max(best or 0, int(v))
    if best is None and "ts_utc" in store.columns("node_events"):
        v = store.rows("SELECT max(coalesce(ts_utc, ts)) FROM node_events")[0][0]
        if v is not None:
            best = epoch_ns(v)
    return best


_NO_ANCHORS = {"input_id": pl.Int64, "line_no": pl.Int64, "t": pl.Int64}


def _anchors(store: Store, input_ids: list[int], clock: Clock) -> pl.DataFrame:
    """(input_id, line_no, t) of every timed line of these inputs, for rows with no time."""
    parts = []
    ids = ",".join(str(int(i)) for i in sorted(set(input_ids)))
    if not ids:
        return pl.DataFrame(schema=_NO_ANCHORS)
    for table in _TIMED_LOG_TABLES:
        cols = store.columns(table)
        if cols.get("ts", "").upper() != "TIMESTAMP" or not {"input_id", "line_no"} <= set(cols):
            continue
        node = '"node"' if "node" in cols else "NULL::VARCHAR"
        df = store.frame(f'SELECT input_id::BIGINT AS input_id, line_no::BIGINT AS line_no, {node} AS node, ts '
                         f'FROM "{table}" WHERE ts IS NOT NULL AND line_no IS NOT NULL AND input_id IN ({ids})')
        parts.append(df.select("input_id", "line_no", t=clock.expr()))
    if not parts:
        return pl.DataFrame(schema=_NO_ANCHORS)
    return pl.concat(parts).unique(["input_id", "line_no"], keep="first").sort("input_id", "line_no")


def with_time(store: Store, df: pl.DataFrame, clock: Clock, ts: str = "ts") -> pl.DataFrame:
    """Adds ``t`` (epoch ns on the common clock) and ``t_inferred`` (the line whose time was
    borrowed: the nearest earlier timed line of the same file, else the next one); rows that find
    no time are left out."""
    df = df.with_columns(t=clock.expr(ts), t_inferred=pl.lit(None, dtype=pl.Int64))
    missing = df.filter(pl.col("t").is_null() & pl.col("input_id").is_not_null() & pl.col("line_no").is_not_null())
    if missing.is_empty():
        return df.filter(pl.col("t").is_not_null())
    anchors = _anchors(store, missing["input_id"].to_list(), clock)
    if anchors.is_empty():
        return df.filter(pl.col("t").is_not_null())
    df = df.with_row_index("_row").with_columns(pl.col("input_id").cast(pl.Int64), pl.col("line_no").cast(pl.Int64))
    todo = df.filter(pl.col("t").is_null() & pl.col("line_no").is_not_null()).select("_row", "input_id", "line_no") \
        .sort("input_id", "line_no")
    a = anchors.rename({"line_no": "a_line", "t": "a_t"}).with_columns(a_key=pl.col("a_line"))
    # both sides are sorted by (input_id, line_no)
    back = todo.join_asof(a, left_on="line_no", right_on="a_key", by="input_id", strategy="backward",
                          check_sortedness=False)
    fwd = todo.join_asof(a, left_on="line_no", right_on="a_key", by="input_id", strategy="forward",
                         check_sortedness=False)
    got = back.select("_row", b_t="a_t", b_line="a_line").join(
        fwd.select("_row", f_t="a_t", f_line="a_line"), on="_row").select(
        "_row", _t=pl.coalesce("b_t", "f_t"),
        _l=pl.when(pl.col("b_t").is_not_null()).then("b_line").otherwise("f_line"))
    df = df.join(got, on="_row", how="left").with_columns(
        t=pl.coalesce("t", "_t"), t_inferred=pl.when(pl.col("t").is_null()).then("_l")).drop("_row", "_t", "_l")
    return df.filter(pl.col("t").is_not_null())


def step_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """``iterations`` with ``t`` and, for a training step, ``prev``: the time of the rank's step
    logged before it (the step's slice runs from there, or from its printed step time);
    ``validation`` is a bool. Sorted by rank, node, attempt and time."""
    df = select(store, "iterations", ["rank", "node", "attempt", "ts", "iteration", "validation", "elapsed_ms",
                                      "lm_loss", "grad_norm", "throughput_tflops", "tokens_per_s", "mfu_pct",
                                      "input_id", "line_no"])
    if df is None or df.is_empty():
        return None
    df = with_time(store, df, clock).sort("rank", "node", "attempt", "t", "line_no", nulls_last=True)
    df = df.with_columns(validation=pl.col("validation").fill_null(False).cast(pl.Boolean))
    # the training steps are a sequence of their own (a validation line between two is no step)
    prev = pl.col("t").shift(1).over(["rank", "node", "attempt", "validation"])
    return df.with_columns(prev=pl.when(~pl.col("validation")).then(prev))


def progress_stretches(store: Store, clock: Clock) -> tuple[pl.DataFrame, pl.DataFrame] | None:
    """From the c10d status lines (with both counters): the stretches in which a rank's counters
    of a process group did not move (two lines or more: ``start``, ``end``, ``n`` lines, ``enq``,
    ``comp``, the first line's ``input_id``/``line_no`` and the ``last_line``), and the watchdog's
    failure and dump-signal lines (with ``t``); ``pg`` is the group's name (``pg_name``)."""
    df = select(store, "progress", ["rank", "node", "attempt", "ts", "pg_id", "pg_desc", "kind", "last_enqueued",
                                    "last_completed", "failing_seq", "detector_rank", "input_id", "line_no"],
                "ts IS NOT NULL AND last_enqueued IS NOT NULL AND last_completed IS NOT NULL")
    if df is None or df.is_empty():
        return None
    df = df.with_columns(t=clock.expr(), pg=pl.coalesce(pl.col("pg_desc"), pl.concat_str(
        [pl.lit("PG "), pl.col("pg_id").cast(pl.String)]), pl.lit("PG not named on the line")))
    keys = ["rank", "node", "attempt", "pg"]
    df = df.sort(*keys, "t", "line_no", nulls_last=True)
    changed = ((pl.col("last_enqueued") != pl.col("last_enqueued").shift(1).over(keys))
               | (pl.col("last_completed") != pl.col("last_completed").shift(1).over(keys))).fill_null(True)
    df = df.with_columns(run=changed.cast(pl.Int64).cum_sum().over(keys))
    runs = df.group_by(*keys, "run").agg(
        start=pl.col("t").min(), end=pl.col("t").max(), n=pl.len(), enq=pl.col("last_enqueued").first(),
        comp=pl.col("last_completed").first(), input_id=pl.col("input_id").first(),
        line_no=pl.col("line_no").first(), last_line=pl.col("line_no").last(),
    ).filter((pl.col("n") >= 2) & (pl.col("end") > pl.col("start"))).sort(*keys, "start", nulls_last=True)
    return runs, df.filter(pl.col("kind").is_in(["pg_status", "dump_signal"]))


def _collective_frame(store: Store) -> pl.DataFrame | None:
    df = select(store, "collectives", ["rank", "node", "attempt", "ts", "kind", "pg_id", "pg_desc", "seq", "op",
                                       "numel_in", "numel_out", "timeout_ms", "ran_for_ms", "state", "time_created",
                                       "time_started", "time_completed", "input_id", "line_no"],
                f"kind IS NULL OR kind NOT IN ({', '.join(repr(k) for k in _PROFILE_KINDS)})")
    return None if df is None or df.is_empty() else df


def collective_lines(store: Store, clock: Clock) -> pl.DataFrame | None:
    """The logged collectives (not Flight Recorder entries, not profiler kernels) with ``t``; a
    watchdog's timeout once per collective and rank (its later
    re-statements, "watchdog thread terminated with exception: ...", are no second wait), named
    by whichever of its lines names the group."""
    df = _collective_frame(store)
    if df is None:
        return None
    logged = with_time(store, df.filter(pl.col("kind") != "flight_recorder"), clock)
    timeout = pl.col("kind").is_in(_TIMEOUT_KINDS) & pl.col("seq").is_not_null()
    same = ["rank", "node", "attempt", "seq", "op", "kind"]
    logged = pl.concat([
        logged.filter(timeout).sort("t", "input_id", "line_no").with_columns(
            pg_desc=pl.col("pg_desc").drop_nulls().first().over(same),
            pg_id=pl.col("pg_id").drop_nulls().first().over(same)).unique(same, keep="first", maintain_order=True),
        logged.filter(~timeout)])
    return logged


def flight_recorder(store: Store) -> list[dict]:
    """Flight Recorder entries with a time: their row, ``t0`` (created, else started, else
    completed) and ``t1`` (completed, or None), epoch ns as recorded, and ``pg`` (``pg_name``)."""
    df = _collective_frame(store)
    out = []
    for r in [] if df is None else df.filter(pl.col("kind") == "flight_recorder").iter_rows(named=True):
        times = [v for v in (r["time_created"], r["time_started"], r["time_completed"]) if v is not None]
        if times:
            out.append(r | {"t0": epoch_ns(times[0]), "pg": pg_name(r["pg_desc"], r["pg_id"]),
                            "t1": epoch_ns(r["time_completed"]) if r["time_completed"] is not None else None})
    return out


def event_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """``events`` with ``t``, but ``TRACE_NOISE``, lines that are a row of ``collectives`` (a
    timeout is a slice there) and an exception's bare line where its normalised multi-line view
    (``python_traceback``) is a row too."""
    noise = ", ".join(f"'{k}'" for k in sorted(TRACE_NOISE))
    df = select(store, "events", ["rank", "node", "attempt", "ts", "kind", "level", "exc_type", "detail", "message",
                                  "path", "duration_s", "finished", "iteration", "pg_desc", "pg_id", "input_id",
                                  "line_no"], f"kind IS NULL OR kind NOT IN ({noise})")
    if df is None or df.is_empty():
        return None
    if {"input_id", "line_no"} <= set(store.columns("collectives")):
        seen = store.frame("SELECT DISTINCT input_id, line_no FROM collectives WHERE line_no IS NOT NULL")
        df = df.join(seen.select(pl.col("input_id").cast(df.schema["input_id"]),
                                 pl.col("line_no").cast(df.schema["line_no"])), on=["input_id", "line_no"], how="anti")
    tb = df.filter(pl.col("kind") == "python_traceback").select("input_id", "message").unique()
    df = df.join(tb.with_columns(_dup=pl.lit(True)), on=["input_id", "message"], how="left").filter(
        ~((pl.col("kind") == "exception") & pl.col("_dup").fill_null(False))).drop("_dup")
    return with_time(store, df, clock)


def nccl_warn_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """NCCL WARN lines (``nccl_lines``) with their ``text`` and a borrowed ``t`` (they have no
    time of their own)."""
    if "level" not in store.columns("nccl_lines") or "text" not in store.columns("lines"):
        return None
    df = store.frame("SELECT n.rank, n.node, n.attempt, NULL::TIMESTAMP AS ts, n.kind, n.host, n.pid, n.cuda_dev, "
                     "n.input_id, n.line_no, l.text FROM nccl_lines n LEFT JOIN lines l "
                     "USING (input_id, line_no) WHERE n.level = 'WARN'")
    return None if df.is_empty() else with_time(store, df, clock)


def exit_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """``exits`` with ``t`` (from ``time``)."""
    df = select(store, "exits", ["rank", "node", "attempt", "time", "exitcode", "signal", "root_cause", "host",
                                 "local_rank", "pid", "input_id", "line_no"])
    if df is None or df.is_empty():
        return None
    return with_time(store, df.rename({"time": "ts"}), clock)


def agent_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """torchrun's lines with ``t`` and ``worker``: the rank whose worker pid the line names (a
    closing signal to process N), else None (the line is the launcher's, on its node)."""
    df = select(store, "agent", ["rank", "node", "attempt", "ts", "kind", "exitcode", "signal", "pid", "local_rank",
                                 "input_id", "line_no"], "kind IS NULL OR kind <> 'launch_config'")
    if df is None or df.is_empty():
        return None
    pid_rank = _pid_ranks(store)
    df = with_time(store, df, clock)
    workers = [pid_rank.get(pid) if pid is not None else None for pid in df["pid"].to_list()]
    return df.with_columns(worker=pl.Series(workers, dtype=pl.Int64))


def slurm_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """The scheduler's lines with ``t``."""
    df = select(store, "slurm", ["rank", "node", "attempt", "ts", "kind", "job_id", "host", "tasks", "exit_code",
                                 "reason", "input_id", "line_no"])
    return None if df is None or df.is_empty() else with_time(store, df, clock)


def job_spans(store: Store) -> list[dict]:
    """The scheduler's records of the whole job (``job`` rows of no step, with a start), once per
    (job, start, end): their row, ``t0`` and ``t1`` (None while running), epoch ns."""
    df = select(store, "job", ["job_id", "step", "source", "name", "state", "reason", "start", "end", "input_id",
                               "line_no"], "step IS NULL AND start IS NOT NULL")
    out, seen = [], set()
    for r in [] if df is None else df.sort("source", "line_no", nulls_last=True).iter_rows(named=True):
        key = (r["job_id"], r["start"], r["end"])
        if key not in seen:
            seen.add(key)
            out.append(r | {"t0": epoch_ns(r["start"]), "t1": epoch_ns(r["end"]) if r["end"] is not None else None})
    return out


def node_event_rows(store: Store, clock: Clock) -> pl.DataFrame | None:
    """Kernel-log events (context rows left out) with ``t`` on the logs' common clock (``ts_utc``
    already carries the zone and the node's offset; a bare ``ts`` less the offset) and ``node``
    (else the host)."""
    if not store.columns("node_events"):
        return None
    df = select(store, "node_events", ["node", "host", "ts", "ts_utc", "kind", "code", "category", "meaning",
                                       "device", "pci", "gpu_index", "global_rank", "message", "ts_basis",
                                       "order_confidence", "input_id", "line_no"],
                f"coalesce(ts_utc, ts) IS NOT NULL AND coalesce(kind, '') NOT IN ({node_context_sql()})")
    if df.is_empty():
        return None
    return df.with_columns(t=pl.coalesce(pl.col("ts_utc").cast(pl.Datetime("ns")).dt.epoch("ns"), clock.expr("ts")),
                           node=pl.coalesce("node", "host"))


def _profile_rows(store: Store, table: str, wanted: list[str], where: str, order: str,
                  limit: int) -> tuple[pl.DataFrame, int]:
    have = store.columns(table)
    sel = ", ".join(f'"{c}"' if c in have else f'NULL AS "{c}"' for c in wanted)
    total = store.rows(f"SELECT count(*) FROM {table} WHERE {where}")[0][0]
    df = store.frame(f"SELECT {sel} FROM {table} WHERE {where} ORDER BY {order} LIMIT {int(limit)}")
    return df.with_columns(t0=pl.col("start").cast(pl.Datetime("ns")).dt.epoch("ns"),
                           t1=pl.col("end").cast(pl.Datetime("ns")).dt.epoch("ns")), total


def kernel_rows(store: Store, lo: int, hi: int, limit: int) -> tuple[pl.DataFrame, int] | None:
    """Profiler kernels (nsys, Kineto) that overlap [lo, hi] (epoch ns, as recorded: UTC), the
    latest ``limit`` of them with ``t0``/``t1``, and how many the window holds."""
    if not {"start", "end"} <= set(store.columns("kernels")):
        return None
    return _profile_rows(store, "kernels", ["rank", "host", "pid", "stream", "device", "start", "end", "name", "op",
                                            "collective", "dtype", "algo", "proto", "bytes", "seq", "pg", "is_nccl",
                                            "source"],
                         f'epoch_ns("end") >= {int(lo)} AND epoch_ns(start) <= {int(hi)}',
                         '"end" DESC, start DESC, rank, stream, name', limit)


def nvtx_rows(store: Store, lo: int, hi: int, limit: int) -> tuple[pl.DataFrame, int] | None:
    """NVTX ranges that overlap [lo, hi] like ``kernel_rows`` (``t1`` None for a mark)."""
    if not {"start", "end"} <= set(store.columns("nvtx")):
        return None
    return _profile_rows(store, "nvtx", ["rank", "pid", "tid", "start", "end", "text", "domain", "event_type"],
                         f'start IS NOT NULL AND epoch_ns(coalesce("end", start)) >= {int(lo)} '
                         f'AND epoch_ns(start) <= {int(hi)}',
                         'coalesce("end", start) DESC, start DESC, rank, tid, text', limit)
