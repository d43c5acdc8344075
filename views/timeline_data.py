"""What the Timeline screen draws, read from the store without Textual.

One *lane* per rank, grouped by node; each node also has a lane of its own (kernel/Xid/NIC
events and launcher lines that name a node but no rank) and, collapsed, a lane that merges
its ranks. A lane holds *marks*: timestamped rows of the store, one kind each (``KINDS``).

Sources: the rows of ``postmortem.views.timeline`` (the timeline reader shared with the HTML
report and the Perfetto export; only rows with a time of their own, no time is guessed):
iterations, c10d status lines, collectives, profiler collectives, events (lines already read
from ``collectives``/``progress`` are not repeated), the launcher, exits, the scheduler, each
rank's *last line*, and kernel-log events inside the run's span.

Times are seconds from ``TimelineData.origin`` (epoch microseconds, UTC as logged), with the
node's clock offset taken off (``timeline.Clock``, as the Perfetto export does).

Drawing cost: ``Lane.cells`` finds the kind of each screen column by bisecting per-kind sorted
time lists at column boundaries, so one lane costs O(width x kinds x log n), whatever its size.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from postmortem.views import timeline

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


# --- from the timeline reader --------------------------------------------------------------

# the timeline reader's rows the lanes show, one reader per kind of row
_READERS = (timeline.iterations, timeline.progress, timeline.collectives, timeline.collective_timing,
            timeline.events, timeline.agent, timeline.exits, timeline.slurm, timeline.last_lines)


def load(con, culprit_ranks: list[int] | None = None, culprit_nodes: list[str] | None = None) -> TimelineData:
    """Everything the Timeline draws, from a DuckDB connection (or cursor) on a store."""
    store = timeline.Store(con)
    clock = timeline.Clock(store)
    rank_node, gpu_of = timeline.rank_nodes(store)
    rows: list[timeline.Entry] = []
    for read in _READERS:
        # an events line that is a collective or a status line too is marked from that table
        rows += [e for e in read(store) if e.source != "repeated"]
    data = _assemble(store, rows, timeline.node_events(store, clock), clock, rank_node, gpu_of,
                     list(culprit_ranks or []), list(culprit_nodes or []))
    _add_in_flight(data, timeline.in_flight(store), clock)
    return data


def _add_in_flight(data: TimelineData, spans: list[tuple], clock: timeline.Clock) -> None:
    for rank, node, start_us, end_us in spans:
        lane = data.rank_lanes.get(int(rank))
        if lane is None:
            continue
        start, end = (clock.us(us, lane.node or node) for us in (start_us, end_us))
        lane.busy.append(((start - data.origin_us) / 1e6, (end - data.origin_us) / 1e6))
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


def _assemble(store, rows, node_rows, clock, rank_node, gpu_of, culprit_ranks, culprit_nodes) -> TimelineData:
    def node_of(rank, node):
        return rank_node.get(rank) or node if rank is not None else node

    # common axis: log times minus the node's clock offset (node events are on it already)
    fixed = []
    for e in rows:
        node = node_of(e.rank, e.node)
        fixed.append((e.rank, node, clock.us(e.us, node), e.kind, e.full_text, e.input_id, e.line_no))
    log_times = [row[2] for row in fixed]
    lo, hi = (min(log_times), max(log_times)) if log_times else (None, None)
    dropped = 0
    for e in node_rows:
        us, text = e.us, e.full_text
        if lo is not None and not (lo - NODE_EVENT_MARGIN_S * 1e6 <= us <= hi + NODE_EVENT_MARGIN_S * 1e6):
            dropped += 1
            continue
        fixed.append((None, e.node, us, "node", text, e.input_id, e.line_no))
        if e.rank is not None:   # an Xid that maps to a GPU, an OOM kill of a rank: on that rank's lane too
            fixed.append((int(e.rank), node_of(int(e.rank), e.node), us, "node", text, e.input_id, e.line_no))
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
    if {"input_id", "path"} <= set(store.columns("inputs")):
        paths = {int(i): p for i, p in store.rows("SELECT input_id, path FROM inputs")}
    notes = [f"{dropped} kernel-log event(s) more than {NODE_EVENT_MARGIN_S:g} s outside the run's logs left out"] \
        if dropped else []
    return TimelineData(origin, min(times, default=0.0), max(times, default=0.0), nodes, ranks_of, rank_lanes,
                        node_lanes, job, [r for r in culprit_ranks], [n for n in culprit_nodes], gpu_of, paths, notes)
