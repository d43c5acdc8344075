"""What the Timeline screen draws, read from the store without Textual.

One *lane* per rank, grouped by node; each node also has a lane of its own (kernel/Xid/NIC
events and launcher lines that name a node but no rank) and, collapsed, a lane that merges
its ranks. A lane holds *marks*: timestamped rows of the store, one kind each (``KINDS``).

Sources (only rows with a time of their own: tables or rows without one are skipped, no time
is guessed): ``iterations``; ``progress`` (the c10d status lines: a *collective* mark where a
rank's enqueued/completed counters moved, a *timeout* where the watchdog reported a failure);
``collectives`` (watchdog timeouts, Flight Recorder entries, NCCL COLL lines) where that table
has a time column; ``collective_timing`` (profiler collectives); ``events`` (init, warnings,
errors; lines already in ``collectives``/``progress`` are not repeated); ``agent``, ``exits``
and ``slurm`` (launcher and scheduler); ``node_events`` (kernel log: Xid, link down, ...)
inside the run's span; and each rank's *last line*, its latest timestamped row of any table.

Times are seconds from ``TimelineData.origin`` (epoch microseconds, UTC as logged), with the
node's clock offset from ``node_clocks`` taken off like ``postmortem export perfetto`` does.

Drawing cost: ``Lane.cells`` finds the kind of each screen column by bisecting per-kind sorted
time lists at column boundaries, so one lane costs O(width x kinds x log n), whatever its size.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta

# Mark kinds, most important first: a screen column shows the first kind it holds.
# "inflight" is not a mark: it fills the empty columns where a rank had collective work enqueued
# but not completed (c10d progress lines), so 39 waiting ranks draw a band and the one that never
# entered the collective draws none.
KINDS = ("timeout", "error", "last", "node", "warning", "init", "iteration", "collective", "event", "inflight")
GLYPH = {"timeout": "⊘", "error": "✖", "last": "■", "node": "◆", "warning": "▲", "init": "▶",
         "collective": "•", "iteration": "│", "event": "·", "inflight": "━"}
LABEL = {"timeout": "timeout", "error": "error", "last": "last line", "node": "node event", "warning": "warning",
         "init": "init", "collective": "collective", "iteration": "iteration", "event": "other",
         "inflight": "work in flight"}
ALARM_KINDS = ("timeout", "error")

# ``events`` kinds that are no mark (periodic status lines live in ``progress``; frames belong
# to their exception) and the kinds that mark a process or process group starting.
_NOISE = {"work_update", "service_thread", "traceback", "cpp_frames", "fr_trace_detail", "launch_config"}
_INIT = re.compile(r"^(pg_options|env_banner|megatron_startup)$|(^|_)(init|startup|process_start|worker_start)($|_)")
_TIMEOUT = re.compile(r"timeout|pg_status|watchdog")
_ERROR = re.compile(r"exception|traceback|error|terminate|fault|oom|signal|abort|nan|inf_|killed|fail|teardown")
_WARNING = re.compile(r"warn|desync|mismatch|dump|heartbeat|missing|retry|slow")
_ERROR_LEVELS = {"E", "ERROR", "F", "FATAL", "CRITICAL"}
_WARNING_LEVELS = {"W", "WARN", "WARNING"}
# kernel-log rows that are context, not events (identity lines, driver banner, detail lines)
_NODE_CONTEXT = {"gpu_identity", "nvrm_driver", "hung_task_detail", "oom_constraint"}
# node events this long before the first or after the last log line are left out (a kernel
# journal may span days; the run is what the timeline is about)
NODE_EVENT_MARGIN_S = 300.0


class Mark:
    """One timestamped row: ``t`` seconds from the origin, its kind, its text (untrusted log
    text: shown through tui.text) and where it came from (``input_id``, ``line_no``)."""

    __slots__ = ("t", "kind", "text", "rank", "node", "input_id", "line_no")

    def __init__(self, t, kind, text, rank, node, input_id, line_no):
        self.t, self.kind, self.text = t, kind, text
        self.rank, self.node, self.input_id, self.line_no = rank, node, input_id, line_no

    def __repr__(self) -> str:
        return f"Mark({self.t:.3f}, {self.kind!r}, rank={self.rank}, node={self.node!r})"


@dataclass
class Lane:
    key: str                 # "rank:17", "node:h20-node-03", "nodeall:h20-node-03", "job"
    rank: int | None
    node: str | None
    marks: list[Mark] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    by_kind: dict[str, list[float]] = field(default_factory=dict)
    busy: list[tuple[float, float]] = field(default_factory=list)   # work in flight: (start, end) seconds

    def finish(self) -> Lane:
        """Sort the marks and build the per-kind time lists (call once, after adding marks and spans)."""
        self.marks.sort(key=lambda m: (m.t, KINDS.index(m.kind), m.input_id or 0, m.line_no or 0))
        self.busy = _merge_spans(self.busy)
        self.times = [m.t for m in self.marks]
        self.by_kind = {}
        for m in self.marks:
            self.by_kind.setdefault(m.kind, []).append(m.t)
        return self

    def cells(self, t0: float, dt: float, width: int) -> list[str | None]:
        """The kind shown in each of ``width`` columns of ``dt`` seconds from ``t0`` (None: empty)."""
        out: list[str | None] = [None] * width
        end = t0 + dt * width
        for kind in KINDS:
            times = self.by_kind.get(kind)
            if not times:
                continue
            i, n = bisect_left(times, t0), len(times)
            while i < n:
                t = times[i]
                if t >= end:
                    break
                col = int((t - t0) / dt)
                if col >= width:
                    break
                if out[col] is None:
                    out[col] = kind
                # jump to the first time of the next column
                i = bisect_left(times, t0 + (col + 1) * dt, i + 1)
        self._fill_busy(out, t0, dt, width)
        return out

    def _fill_busy(self, out: list[str | None], t0: float, dt: float, width: int) -> None:
        """Empty columns inside a work-in-flight span get the band (marks stay on top)."""
        end = t0 + dt * width
        first = max(bisect_right(self.busy, (t0, float("inf"))) - 1, 0)
        for start, stop in self.busy[first:]:
            if start >= end:
                break
            if stop < t0:
                continue
            for col in range(max(int((start - t0) / dt), 0), min(int((stop - t0) / dt), width - 1) + 1):
                if out[col] is None:
                    out[col] = "inflight"

    def between(self, lo: float, hi: float) -> list[Mark]:
        """Marks with lo <= t < hi."""
        return self.marks[bisect_left(self.times, lo):bisect_left(self.times, hi)]

    def next_after(self, t: float, kinds: tuple[str, ...] | None = None) -> float | None:
        """The first time >= t (of these kinds)."""
        lists = [self.times] if kinds is None else [self.by_kind.get(k, []) for k in kinds]
        found = [ts[i] for ts in lists if (i := bisect_left(ts, t)) < len(ts)]
        return min(found) if found else None

    def prev_before(self, t: float, kinds: tuple[str, ...] | None = None) -> float | None:
        """The last time < t (of these kinds)."""
        lists = [self.times] if kinds is None else [self.by_kind.get(k, []) for k in kinds]
        found = [ts[i - 1] for ts in lists if (i := bisect_left(ts, t)) > 0]
        return max(found) if found else None

    def last_of(self, kind: str) -> float | None:
        times = self.by_kind.get(kind)
        return times[-1] if times else None


@dataclass
class Row:
    """One screen row: a group heading, a node lane, a rank lane or the job lane."""
    kind: str                # "heading" | "node" | "rank" | "job"
    label: str
    lane: Lane | None
    node: str | None = None
    rank: int | None = None
    culprit: bool = False


@dataclass
class TimelineData:
    origin_us: int
    start: float
    end: float
    nodes: list[str]
    ranks_of: dict[str, list[int]]
    rank_lanes: dict[int, Lane]
    node_lanes: dict[str, Lane]
    job_lane: Lane
    culprit_ranks: list[int]
    culprit_nodes: list[str]
    gpu_of: dict[int, int] = field(default_factory=dict)
    paths: dict[int, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _merged: dict[str, Lane] = field(default_factory=dict, repr=False)

    @property
    def n_marks(self) -> int:
        return sum(len(lane.marks) for lane in self.all_lanes())

    def all_lanes(self) -> list[Lane]:
        return [*self.rank_lanes.values(), *self.node_lanes.values(), self.job_lane]

    def merged(self, node: str) -> Lane:
        """The node's collapsed lane: its own marks and all its ranks' (built on first use)."""
        lane = self._merged.get(node)
        if lane is None:
            lane = Lane(f"nodeall:{node}", None, node)
            lane.marks = list(self.node_lanes[node].marks)
            for r in self.ranks_of.get(node, []):
                lane.marks += self.rank_lanes[r].marks
                lane.busy += self.rank_lanes[r].busy
            self._merged[node] = lane.finish()
        return lane

    def wall(self, t: float) -> datetime:
        return datetime(1970, 1, 1) + timedelta(microseconds=self.origin_us + t * 1e6)

    def seconds(self, wall: datetime, line: tuple[int, int] | None = None, rank: int | None = None) -> float:
        """``wall`` (a time as logged) on this axis: the time of the mark drawn for log ``line``
        (input_id, line_no) where a lane has one, its node's clock offset already taken off
        (``rank``'s lane is looked at first); else ``wall`` as it stands."""
        if line is not None:
            lanes = [self.rank_lanes[rank]] if rank in self.rank_lanes else []
            for lane in lanes + self.all_lanes():
                mark = next((m for m in lane.marks if (m.input_id, m.line_no) == line), None)
                if mark is not None:
                    return mark.t
        return (wall - self.wall(0)).total_seconds()

    def rows(self, collapsed: set[str] | None = None) -> list[Row]:
        """The rows in screen order: the job lane (when it has marks), the culprits pinned at
        the top, then each node's lane followed by its ranks (none when collapsed)."""
        collapsed = collapsed or set()
        out: list[Row] = []
        if self.job_lane.marks:
            out.append(Row("job", "job", self.job_lane))
        pinned = [r for r in self.culprit_ranks if r in self.rank_lanes]
        pinned_nodes = [n for n in self.culprit_nodes if n in self.node_lanes
                        and not any(r in self.ranks_of.get(n, []) for r in pinned)]
        if pinned or pinned_nodes:
            out.append(Row("heading", "culprit", None, culprit=True))
            out += [self._rank_row(r, pinned=True) for r in pinned]
            out += [self._node_row(n, True, pinned=True) for n in pinned_nodes]
        for node in self.nodes:
            shut = node in collapsed
            out.append(self._node_row(node, shut))
            if not shut:
                out += [self._rank_row(r) for r in self.ranks_of.get(node, [])]
        return out

    def _rank_row(self, rank: int, pinned: bool = False) -> Row:
        gpu = self.gpu_of.get(rank)
        label = ("★ " if rank in self.culprit_ranks else "  ") + f"rank {rank}" + (f" gpu{gpu}" if gpu is not None else "")
        lane = self.rank_lanes[rank]
        return Row("rank", label, lane, lane.node, rank, culprit=rank in self.culprit_ranks)

    def _node_row(self, node: str, shut: bool, pinned: bool = False) -> Row:
        n = len(self.ranks_of.get(node, []))
        label = ("▸ " if shut else "▾ ") + node + (f" ·{n}" if n else "")
        lane = self.merged(node) if shut else self.node_lanes[node]
        return Row("node", label, lane, node, culprit=node in self.culprit_nodes)


# --- the time axis ---------------------------------------------------------------------------

_STEPS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900,
          1800, 3600, 7200, 10800, 21600, 43200, 86400, 172800, 604800)


def clock_text(data: TimelineData, t: float, fine: bool = False) -> str:
    wall = data.wall(t)
    return wall.strftime("%H:%M:%S") + (f".{wall.microsecond // 1000:03d}" if fine else "")


def duration_text(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.3g} ms"
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{seconds / 3600:.3g} h"


def ruler(data: TimelineData, t0: float, dt: float, width: int) -> tuple[str, list[int]]:
    """The labels line of the time axis (HH:MM:SS at round times, .mmm below a second) and
    the columns of its ticks."""
    fine = dt * 14 < 1
    spacing = 14 if fine else 10
    step = next((s for s in _STEPS if s / dt >= spacing), _STEPS[-1])
    wall0 = data.origin_us / 1e6 + t0
    first = (int(wall0 // step) + 1) * step if step >= 1 else (wall0 // step + 1) * step
    chars = [" "] * width
    ticks = []
    k = 0
    while True:
        t = first + k * step - data.origin_us / 1e6
        col = int((t - t0) / dt)
        if col >= width:
            break
        k += 1
        if col < 0:
            continue
        ticks.append(col)
        label = clock_text(data, t, fine)
        if col + len(label) <= width:
            chars[col:col + len(label)] = label
    return "".join(chars), ticks


# --- reading the store ---------------------------------------------------------------------

def load(con, culprit_ranks: list[int] | None = None, culprit_nodes: list[str] | None = None) -> TimelineData:
    """Everything the Timeline draws, from a DuckDB connection (or cursor) on a store."""
    have = _tables(con)
    offsets = _offsets(con, have)
    rank_node, gpu_of = _ranks(con, have)
    rows: list[tuple] = []   # (rank, node, epoch_us, kind, text, input_id, line_no)
    for source in (_iterations, _progress, _collectives, _collective_timing, _events, _agent, _exits, _slurm,
                   _last_lines):
        rows += source(con, have)
    node_rows = _node_events(con, have)
    data = _assemble(con, have, rows, node_rows, offsets, rank_node, gpu_of,
                     list(culprit_ranks or []), list(culprit_nodes or []))
    _add_in_flight(data, _in_flight(con, have), offsets)
    return data


def _in_flight(con, have) -> list[tuple]:
    """(rank, node, start_us, end_us) where a process group of the rank had work enqueued but not
    completed: from one c10d progress line to the next of the same group (the state holds
    between lines)."""
    cols = have.get("progress", {})
    if not _timed(have, "progress") or not {"last_enqueued", "last_completed", "rank"} <= set(cols):
        return []
    c = lambda name, cast="": _col(have, "progress", name, cast)  # noqa: E731
    pg = f"coalesce({c('pg_desc')}, {c('pg_id', 'VARCHAR')}, '?')"
    return con.execute(f"""
        SELECT rank, node, us, coalesce(next_us, us) FROM (
            SELECT rank, {c('node')} AS node, epoch_us(ts) AS us, last_enqueued > last_completed AS busy,
                   lead(epoch_us(ts)) OVER (PARTITION BY rank, {c('node')}, {c('attempt')}, {pg}
                                            ORDER BY ts, {c('line_no')}) AS next_us
            FROM progress WHERE ts IS NOT NULL AND rank IS NOT NULL)
        WHERE busy""").fetchall()


def _add_in_flight(data: TimelineData, spans: list[tuple], offsets: dict[str, float]) -> None:
    for rank, node, start_us, end_us in spans:
        lane = data.rank_lanes.get(int(rank))
        if lane is None:
            continue
        shift = int(offsets.get(lane.node or node, 0.0) * 1e6)
        lane.busy.append(((start_us - shift - data.origin_us) / 1e6, (end_us - shift - data.origin_us) / 1e6))
    for lane in data.rank_lanes.values():
        lane.busy = _merge_spans(lane.busy)
    data._merged.clear()


def _merge_spans(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for start, stop in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], stop))
        else:
            out.append((start, stop))
    return out


def _tables(con) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for table, column, dtype in con.execute(
            "SELECT table_name, column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = 'main'").fetchall():
        out.setdefault(table, {})[column] = dtype
    return out


def _timed(have, table: str, column: str = "ts") -> bool:
    return have.get(table, {}).get(column, "").upper().startswith("TIMESTAMP")


def _col(have, table: str, column: str, cast: str = "") -> str:
    """The column, or NULL where this store's table lacks it."""
    if column in have.get(table, {}):
        return f'"{column}"' + (f"::{cast}" if cast else "")
    return f"NULL::{cast or 'VARCHAR'}"


def _offsets(con, have) -> dict[str, float]:
    if "offset_s" not in have.get("node_clocks", {}):
        return {}
    return {n: float(o) for n, o in con.execute(
        "SELECT node, offset_s FROM node_clocks WHERE offset_s IS NOT NULL AND node IS NOT NULL").fetchall()}


def _ranks(con, have) -> tuple[dict[int, str | None], dict[int, int]]:
    if "rank" not in have.get("ranks", {}):
        return {}, {}
    gpu = _col(have, "ranks", "cuda_dev", "BIGINT")
    rank_node, gpu_of = {}, {}
    for rank, node, dev in con.execute(f"SELECT rank, {_col(have, 'ranks', 'node')}, {gpu} FROM ranks "
                                       "WHERE rank IS NOT NULL ORDER BY rank").fetchall():
        rank_node[int(rank)] = node
        if dev is not None:
            gpu_of[int(rank)] = int(dev)
    return rank_node, gpu_of


def _base(have, table: str) -> str:
    return (f"{_col(have, table, 'rank', 'BIGINT')} AS rank, {_col(have, table, 'node')} AS node, "
            f"{_col(have, table, 'input_id', 'BIGINT')} AS input_id, {_col(have, table, 'line_no', 'BIGINT')} AS line_no")


def _iterations(con, have) -> list[tuple]:
    if not _timed(have, "iterations"):
        return []
    c = lambda name, cast="": _col(have, "iterations", name, cast)  # noqa: E731
    sql = (f"SELECT {_base(have, 'iterations')}, epoch_us(ts) AS us, "
           f"concat('iteration ', coalesce({c('iteration', 'VARCHAR')}, '?'), "
           f"CASE WHEN {c('validation', 'BOOLEAN')} THEN ' (validation)' ELSE '' END, "
           f"CASE WHEN {c('lm_loss', 'DOUBLE')} IS NOT NULL THEN concat(', loss ', round({c('lm_loss', 'DOUBLE')}, 4)) ELSE '' END, "
           f"CASE WHEN {c('grad_norm', 'DOUBLE')} IS NOT NULL THEN concat(', grad norm ', round({c('grad_norm', 'DOUBLE')}, 3)) ELSE '' END, "
           f"CASE WHEN {c('elapsed_ms', 'DOUBLE')} IS NOT NULL THEN concat(', ', round({c('elapsed_ms', 'DOUBLE')} / 1000, 2), ' s/step') ELSE '' END) "
           f"FROM iterations WHERE ts IS NOT NULL")
    return [(r, n, us, "iteration", text, i, ln) for r, n, i, ln, us, text in con.execute(sql).fetchall()]


def _progress(con, have) -> list[tuple]:
    """A mark where a rank's counters of a process group moved (or its first status line), and
    the watchdog's failure/dump lines; unchanged periodic lines only count for the last line."""
    cols = have.get("progress", {})
    if not _timed(have, "progress") or not {"last_enqueued", "last_completed"} <= set(cols):
        return []
    c = lambda name, cast="": _col(have, "progress", name, cast)  # noqa: E731
    pg = f"coalesce({c('pg_desc')}, concat('PG ', {c('pg_id', 'VARCHAR')}), 'PG ?')"
    sql = f"""
        WITH p AS (
            SELECT {_base(have, 'progress')}, ts, {c('kind')} AS kind, {pg} AS pg, last_enqueued AS enq,
                   last_completed AS comp, {c('failing_seq', 'BIGINT')} AS failing, {c('detector_rank', 'BIGINT')} AS detector,
                   lag(last_enqueued) OVER w AS prev_enq, lag(last_completed) OVER w AS prev_comp
            FROM progress WHERE ts IS NOT NULL
            WINDOW w AS (PARTITION BY {c('rank')}, {c('node')}, {c('attempt')}, {pg} ORDER BY ts, {c('line_no')}))
        SELECT rank, node, input_id, line_no, epoch_us(ts), kind, pg, enq, comp, failing, detector FROM p
        WHERE kind IN ('pg_status', 'dump_signal') OR prev_enq IS NULL
           OR prev_enq IS DISTINCT FROM enq OR prev_comp IS DISTINCT FROM comp"""
    out = []
    for r, n, i, ln, us, kind, pg, enq, comp, failing, detector in con.execute(sql).fetchall():
        if kind == "pg_status":
            mk, text = "timeout", f"{pg}: watchdog failure at #{failing if failing is not None else '?'}"
        elif kind == "dump_signal":
            who = f"rank {detector}" if detector is not None else "a peer"
            mk, text = "warning", f"{pg}: dump signal from {who}"
        else:
            mk = "collective"
            state = (f"waiting in #{comp + 1}" if enq is not None and comp is not None and enq > comp
                     else "nothing in flight")
            text = f"{pg}: last enqueued #{enq}, last completed #{comp} ({state})"
        out.append((r, n, us, mk, text, i, ln))
    return out


def _collectives(con, have) -> list[tuple]:
    cols = have.get("collectives", {})
    clocks = [c for c in ("ts", "time_started", "time_created", "time_completed")
              if cols.get(c, "").upper().startswith("TIMESTAMP")]
    if not clocks:
        return []
    c = lambda name, cast="": _col(have, "collectives", name, cast)  # noqa: E731
    when = "coalesce(" + ", ".join(clocks) + ")"
    sql = (f"SELECT {_base(have, 'collectives')}, epoch_us({when}), {c('kind')}, {c('op')}, {c('seq', 'BIGINT')}, "
           f"coalesce({c('pg_desc')}, concat('PG ', {c('pg_id', 'VARCHAR')})), {c('state')}, {c('ran_for_ms', 'DOUBLE')} "
           f"FROM collectives WHERE {when} IS NOT NULL "
           f"AND coalesce({c('kind')}, '') NOT IN ('nsys_kernel', 'kineto_kernel', 'profile_kernel')")
    out = []
    for r, n, i, ln, us, kind, op, seq, pg, state, ran in con.execute(sql).fetchall():
        kind = kind or "collective"
        bits = [kind.replace("_", " "), (op or "").upper(), f"#{seq}" if seq is not None else "",
                f"on {pg}" if pg else "", f"({state})" if state else "",
                f"ran for {ran / 1000:g} s" if ran is not None else ""]
        mk = "timeout" if "timeout" in kind else "collective"
        out.append((r, n, us, mk, " ".join(b for b in bits if b), i, ln))
    return out


def _collective_timing(con, have) -> list[tuple]:
    if not _timed(have, "collective_timing", "start"):
        return []
    c = lambda name, cast="": _col(have, "collective_timing", name, cast)  # noqa: E731
    sql = (f"SELECT {c('rank', 'BIGINT')}, epoch_us(start), {c('op')}, {c('coll_index', 'BIGINT')}, {c('pg')}, "
           f"{c('skew_ns', 'BIGINT')}, {c('busbw_gbyte_s', 'DOUBLE')}, {c('input_id', 'BIGINT')}, {c('source')} "
           f"FROM collective_timing WHERE start IS NOT NULL")
    out = []
    for r, us, op, idx, pg, skew, busbw, i, src in con.execute(sql).fetchall():
        bits = [f"profile {(op or '?')} #{idx}", f"on {pg}" if pg else "",
                f"arrived {skew / 1e6:.3g} ms after the first" if skew is not None else "",
                f"busbw {busbw:.3g} GB/s" if busbw is not None else "", f"({src})" if src else ""]
        out.append((r, None, us, "collective", " ".join(b for b in bits if b), i, None))
    return out


def _events(con, have) -> list[tuple]:
    if not _timed(have, "events"):
        return []
    c = lambda name, cast="": _col(have, "events", name, cast)  # noqa: E731
    noise = ", ".join(f"'{k}'" for k in sorted(_NOISE))
    skip = ""
    for table in ("collectives", "progress"):   # their lines are marked from those tables already
        if {"input_id", "line_no"} <= set(have.get(table, {})) and {"input_id", "line_no"} <= set(have["events"]):
            skip += (f" AND NOT EXISTS (SELECT 1 FROM {table} x WHERE x.input_id = e.input_id "
                     f"AND x.line_no = e.line_no)")
    sql = (f"SELECT {_base(have, 'events')}, epoch_us(ts), {c('kind')}, {c('level')}, "
           f"coalesce({c('message')}, {c('detail')}, {c('kind')}) FROM events e "
           f"WHERE ts IS NOT NULL AND coalesce({c('kind')}, '') NOT IN ({noise}){skip}")
    return [(r, n, us, event_kind(kind, level), text or "", i, ln)
            for r, n, i, ln, us, kind, level, text in con.execute(sql).fetchall()]


def event_kind(kind: str | None, level: str | None) -> str:
    """The mark kind of an ``events`` row, from its kind and level."""
    kind = (kind or "").lower()
    level = (level or "").upper()
    if _INIT.search(kind):
        return "init"
    if "timeout" in kind:
        return "timeout"
    if _ERROR.search(kind) or level in _ERROR_LEVELS:
        return "error"
    if _WARNING.search(kind) or level in _WARNING_LEVELS:
        return "warning"
    return "event"


def _agent(con, have) -> list[tuple]:
    if not _timed(have, "agent"):
        return []
    c = lambda name, cast="": _col(have, "agent", name, cast)  # noqa: E731
    sql = (f"SELECT {_base(have, 'agent')}, epoch_us(ts), {c('kind')}, {c('signal')}, {c('exitcode', 'BIGINT')}, "
           f"{c('pid', 'BIGINT')} FROM agent WHERE ts IS NOT NULL AND coalesce({c('kind')}, '') <> 'launch_config'")
    # the launcher's lines are on the rank whose worker pid they name, else on the node/job lane
    pid_rank = {}
    if {"pid", "rank"} <= set(have.get("ranks", {})):
        pid_rank = dict(con.execute("SELECT pid, min(rank) FROM ranks WHERE pid IS NOT NULL GROUP BY pid").fetchall())
    out = []
    for r, n, i, ln, us, kind, sig, code, pid in con.execute(sql).fetchall():
        kind = kind or "agent"
        r = pid_rank.get(pid, r) if pid is not None else r
        text = " ".join(str(b) for b in (f"torchrun: {kind.replace('_', ' ')}", sig,
                                         f"exit {code}" if code is not None else None,
                                         f"pid {pid}" if pid is not None else None) if b)
        if _INIT.search(kind):
            mk = "init"
        elif "closing" in kind:     # the launcher tearing workers down: a consequence, not the fault
            mk = "warning"
        else:
            mk = "error" if (sig or code not in (None, 0)) else "event"
        out.append((r, n, us, mk, text, i, ln))
    return out


def _exits(con, have) -> list[tuple]:
    if not _timed(have, "exits", "time"):
        return []
    c = lambda name, cast="": _col(have, "exits", name, cast)  # noqa: E731
    sql = (f"SELECT {_base(have, 'exits')}, epoch_us(time), {c('exitcode', 'BIGINT')}, {c('signal')}, "
           f"{c('root_cause', 'BOOLEAN')} FROM exits WHERE time IS NOT NULL")
    out = []
    for r, n, i, ln, us, code, sig, root in con.execute(sql).fetchall():
        text = f"exit code {code}" + (f" ({sig})" if sig else "") + (", root cause" if root else "")
        out.append((r, n, us, "error" if code not in (None, 0) else "event", text, i, ln))
    return out


def _slurm(con, have) -> list[tuple]:
    if not _timed(have, "slurm"):
        return []
    c = lambda name, cast="": _col(have, "slurm", name, cast)  # noqa: E731
    sql = (f"SELECT {_base(have, 'slurm')}, epoch_us(ts), {c('kind')}, {c('reason')}, {c('job_id')} "
           f"FROM slurm WHERE ts IS NOT NULL")
    out = []
    for r, n, i, ln, us, kind, reason, job in con.execute(sql).fetchall():
        kind = kind or "slurm"
        text = f"slurm job {job or '?'}: {kind.replace('_', ' ')}" + (f" ({reason})" if reason else "")
        mk = "error" if re.search(r"cancel|abort|fail|timeout|kill|oom", kind) else "event"
        out.append((r, n, us, mk, text, i, ln))
    return out


_LAST_TABLES = ("events", "progress", "iterations", "collectives", "agent")


def _last_lines(con, have) -> list[tuple]:
    """Each rank's latest timestamped row of any log table, with the text of its line."""
    parts = [f"SELECT rank::BIGINT AS rank, node, ts, input_id::BIGINT AS input_id, line_no::BIGINT AS line_no FROM {t} "
             f"WHERE ts IS NOT NULL AND rank IS NOT NULL"
             for t in _LAST_TABLES if _timed(have, t) and {"rank", "node", "input_id", "line_no"} <= set(have[t])]
    if not parts:
        return []
    text = "l.text" if {"text", "input_id", "line_no"} <= set(have.get("lines", {})) else "NULL"
    join = "LEFT JOIN lines l USING (input_id, line_no)" if text != "NULL" else ""
    sql = f"""
        WITH a AS ({' UNION ALL '.join(parts)}),
        b AS (SELECT *, row_number() OVER (PARTITION BY rank ORDER BY ts DESC, input_id DESC, line_no DESC) AS k FROM a)
        SELECT b.rank, b.node, epoch_us(b.ts), {text}, b.input_id, b.line_no FROM b {join} WHERE b.k = 1"""
    return [(r, n, us, "last", "last line: " + (t if t is not None else "(text not stored)"), i, ln)
            for r, n, us, t, i, ln in con.execute(sql).fetchall()]


def _node_events(con, have) -> list[tuple]:
    cols = have.get("node_events", {})
    clocks = [c for c in ("ts_utc", "ts") if cols.get(c, "").upper().startswith("TIMESTAMP")]
    if not clocks:
        return []
    c = lambda name, cast="": _col(have, "node_events", name, cast)  # noqa: E731
    when = "coalesce(" + ", ".join(clocks) + ")"
    corrected = "ts_utc IS NOT NULL" if "ts_utc" in clocks else "FALSE"
    skip = ", ".join(f"'{k}'" for k in sorted(_NODE_CONTEXT))
    sql = (f"SELECT {c('global_rank', 'BIGINT')}, coalesce({c('node')}, {c('host')}), epoch_us({when}), {corrected}, "
           f"{c('kind')}, {c('code')}, {c('meaning')}, {c('message')}, {c('input_id', 'BIGINT')}, {c('line_no', 'BIGINT')} "
           f"FROM node_events WHERE {when} IS NOT NULL AND coalesce({c('kind')}, '') NOT IN ({skip})")
    out = []
    for r, n, us, utc, kind, code, meaning, message, i, ln in con.execute(sql).fetchall():
        head = " ".join(str(b) for b in (kind, code) if b) or "kernel event"
        text = head + (f" ({meaning})" if meaning else "") + (f": {message}" if message else "")
        out.append((r, n, us, utc, text, i, ln))
    return out


def _assemble(con, have, rows, node_rows, offsets, rank_node, gpu_of, culprit_ranks, culprit_nodes) -> TimelineData:
    def node_of(rank, node):
        return rank_node.get(rank) or node if rank is not None else node

    # common axis: log times minus the node's clock offset
    fixed = []
    for r, n, us, kind, text, i, ln in rows:
        node = node_of(r, n)
        fixed.append((r, node, us - int(offsets.get(node, 0.0) * 1e6) if node in offsets else us, kind, text, i, ln))
    log_times = [row[2] for row in fixed]
    lo, hi = (min(log_times), max(log_times)) if log_times else (None, None)
    dropped = 0
    for r, n, us, utc, text, i, ln in node_rows:
        if not utc and n in offsets:
            us -= int(offsets[n] * 1e6)
        if lo is not None and not (lo - NODE_EVENT_MARGIN_S * 1e6 <= us <= hi + NODE_EVENT_MARGIN_S * 1e6):
            dropped += 1
            continue
        fixed.append((None, n, us, "node", text, i, ln))
        if r is not None:   # an Xid that maps to a GPU is on that rank's lane too
            fixed.append((int(r), node_of(int(r), n), us, "node", text, i, ln))
    origin = min((row[2] for row in fixed), default=0)

    nodes = sorted({n for n in rank_node.values() if n} | {row[1] for row in fixed if row[1]})
    rank_lanes: dict[int, Lane] = {r: Lane(f"rank:{r}", r, n) for r, n in rank_node.items()}
    node_lanes: dict[str, Lane] = {n: Lane(f"node:{n}", None, n) for n in nodes}
    job = Lane("job", None, None)
    for r, n, us, kind, text, i, ln in fixed:
        mark = Mark((us - origin) / 1e6, kind, text, r, n, i, ln)
        if r is not None:
            lane = rank_lanes.get(int(r))
            if lane is None:
                lane = rank_lanes[int(r)] = Lane(f"rank:{r}", int(r), n)
            lane.marks.append(mark)
        elif n is not None:
            node_lanes[n].marks.append(mark)
        else:
            job.marks.append(mark)
    ranks_of: dict[str, list[int]] = {}
    unplaced = []
    for r in sorted(rank_lanes):
        lane = rank_lanes[r].finish()
        if lane.node:
            ranks_of.setdefault(lane.node, []).append(r)
        else:
            unplaced.append(r)
    if unplaced:
        nodes.append("(node unknown)")
        node_lanes["(node unknown)"] = Lane("node:(node unknown)", None, None)
        ranks_of["(node unknown)"] = unplaced
    for lane in node_lanes.values():
        lane.finish()
    job.finish()
    times = [lane.times[k] for lane in [*rank_lanes.values(), *node_lanes.values(), job] if lane.times
             for k in (0, -1)]
    paths = {}
    if {"input_id", "path"} <= set(have.get("inputs", {})):
        paths = {int(i): p for i, p in con.execute("SELECT input_id, path FROM inputs").fetchall()}
    notes = [f"{dropped} kernel-log event(s) more than {NODE_EVENT_MARGIN_S:g} s outside the run's logs left out"] \
        if dropped else []
    return TimelineData(origin, min(times, default=0.0), max(times, default=0.0), nodes, ranks_of, rank_lanes,
                        node_lanes, job, [r for r in culprit_ranks], [n for n in culprit_nodes], gpu_of, paths, notes)
