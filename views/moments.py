"""What happened when, read once from the store for the HTML report's per-rank picture and the
TUI's Timeline and Logs screens (their go-to keys): the marks (timeouts, errors and warnings of the
ranks, launcher and scheduler failures, every rank's last line, kernel-log events on the logs'
common clock) and the ``Moments`` a picture centres on (the first failure, the hang's start).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import polars as pl


def frame(run, sql: str, params: list | None = None) -> pl.DataFrame:
    try:
        return run.frame(sql, params)
    except Exception:  # noqa: BLE001 -- a picture must never cost the report
        return pl.DataFrame()


def col(run, table: str, name: str, cast: str = "VARCHAR") -> str:
    """The column, or a typed NULL where this store's table lacks it."""
    return f'"{name}"' if name in run.columns(table) else f"NULL::{cast}"


def timed(run, table: str, column: str = "ts") -> bool:
    rows = run.con.execute("SELECT data_type FROM information_schema.columns WHERE table_name = ? AND column_name = ?",
                           [table, column]).fetchall()
    return bool(rows) and rows[0][0].upper().startswith("TIMESTAMP")


# ``events`` kinds that are no mark (periodic status lines live in ``progress``; frames belong to
# their exception; start-up banners are not what this picture is about).
_NOISE = ("work_update", "service_thread", "traceback", "cpp_frames", "fr_trace_detail", "launch_config",
          "pg_options", "env_banner", "megatron_startup")


_TIMEOUT = re.compile(r"timeout|pg_status|watchdog")


_ERROR = re.compile(r"exception|error|terminate|fault|oom|signal|abort|killed|fail|teardown|nan")


_WARNING = re.compile(r"warn|desync|mismatch|dump|heartbeat|retry|slow")


# kernel-log rows that are context (identities, banners, detail lines), not events
_NODE_CONTEXT = ("gpu_identity", "nvrm_driver", "aer_detail", "oom_constraint", "oom_reaped", "nfs_ok")


# node events worth a labelled line across the picture
NODE_MAJOR = re.compile(r"^(xid|link_down|oom_kill|hung_task|nic_health|mce)$")


class Mark:
    """A timestamped row; ``line`` is its (input_id, line_no) where the row has one (the TUI
    opens it)."""
    __slots__ = ("ts", "rank", "node", "kind", "text", "line")

    def __init__(self, ts, rank, node, kind, text, line=None):
        self.ts, self.rank, self.node, self.kind, self.text = ts, rank, node, kind, text
        self.line = line if line and None not in line else None


def _event_kind(kind: str | None, level: str | None) -> str | None:
    kind, level = (kind or "").lower(), (level or "").upper()
    if _TIMEOUT.search(kind):
        return "timeout"
    if _ERROR.search(kind) or level in ("E", "ERROR", "F", "FATAL", "CRITICAL"):
        return "error"
    if _WARNING.search(kind) or level in ("W", "WARN", "WARNING"):
        return "warning"
    return None


def read_marks(run) -> list[Mark]:
    """Timeouts, errors and warnings of the ranks (``events``, ``exits``), launcher and scheduler
    failures (``agent``, ``slurm``) and every rank's last timestamped row."""
    out: list[Mark] = []
    if timed(run, "events"):
        noise = ", ".join(f"'{k}'" for k in _NOISE)
        rows = frame(run, f"SELECT {col(run, 'events', 'rank', 'BIGINT')} AS rank, {col(run, 'events', 'node')} AS node, "
                          f"ts, {col(run, 'events', 'kind')} AS kind, {col(run, 'events', 'level')} AS level, "
                          f"coalesce({col(run, 'events', 'message')}, {col(run, 'events', 'detail')}, "
                          f"{col(run, 'events', 'kind')}) AS text, {col(run, 'events', 'input_id', 'BIGINT')} AS input_id, "
                          f"{col(run, 'events', 'line_no', 'BIGINT')} AS line_no FROM events "
                          f"WHERE ts IS NOT NULL AND coalesce({col(run, 'events', 'kind')}, '') NOT IN ({noise})")
        for r in rows.iter_rows(named=True):
            kind = _event_kind(r["kind"], r["level"])
            if kind:
                out.append(Mark(r["ts"], r["rank"], r["node"], kind, f"{r['kind']}: {r['text']}",
                                 (r["input_id"], r["line_no"])))
    if timed(run, "exits", "time"):
        rows = frame(run, f"SELECT {col(run, 'exits', 'rank', 'BIGINT')} AS rank, {col(run, 'exits', 'node')} AS node, "
                          f"time AS ts, {col(run, 'exits', 'exitcode', 'BIGINT')} AS code, "
                          f"{col(run, 'exits', 'signal')} AS signal, {col(run, 'exits', 'input_id', 'BIGINT')} AS input_id, "
                          f"{col(run, 'exits', 'line_no', 'BIGINT')} AS line_no FROM exits WHERE time IS NOT NULL")
        for r in rows.iter_rows(named=True):
            if r["code"] not in (None, 0):
                sig = f" ({r['signal']})" if r["signal"] else ""
                out.append(Mark(r["ts"], r["rank"], r["node"], "error", f"process exit code {r['code']}{sig}",
                                 (r["input_id"], r["line_no"])))
    for table in ("agent", "slurm"):
        if not timed(run, table):
            continue
        rows = frame(run, f"SELECT {col(run, table, 'node')} AS node, ts, {col(run, table, 'kind')} AS kind, "
                          f"{col(run, table, 'signal') if table == 'agent' else col(run, table, 'reason')} AS why "
                          f"FROM {table} WHERE ts IS NOT NULL")
        for r in rows.iter_rows(named=True):
            kind = (r["kind"] or "").lower()
            if re.search(r"cancel|abort|fail|timeout|kill|oom|signal|error", kind) or (table == "agent" and r["why"]):
                who = "torchrun" if table == "agent" else "slurm"
                why = f" ({r['why']})" if r["why"] else ""
                out.append(Mark(r["ts"], None, r["node"], "job", f"{who}: {kind.replace('_', ' ')}{why}"))
    out += _last_lines(run)
    return out


def _last_lines(run) -> list[Mark]:
    parts = [f"SELECT rank::BIGINT AS rank, ts FROM {t} WHERE ts IS NOT NULL AND rank IS NOT NULL"
             for t in ("events", "progress", "iterations", "collectives", "agent")
             if timed(run, t) and "rank" in run.columns(t)]
    if not parts:
        return []
    rows = frame(run, f"SELECT rank, max(ts) AS ts FROM ({' UNION ALL '.join(parts)}) GROUP BY rank")
    return [Mark(ts, rank, None, "last", "its last timestamped line") for rank, ts in rows.iter_rows()]


def node_events(run) -> list[Mark]:
    """Kernel-log events with a time (node clock offsets applied as the timeline of the TUI does:
    ``ts_utc`` is already on the logs' common clock; a bare ``ts`` is shifted by the node's
    offset)."""
    cols = run.columns("node_events")
    clocks = [c for c in ("ts_utc", "ts") if c in cols and timed(run, "node_events", c)]
    if not clocks:
        return []
    offsets = {}
    if {"node", "offset_s"} <= set(run.columns("node_clocks")):
        offsets = dict(frame(run, "SELECT node, offset_s FROM node_clocks WHERE offset_s IS NOT NULL").iter_rows())
    skip = ", ".join(f"'{k}'" for k in _NODE_CONTEXT)
    utc = "ts_utc IS NOT NULL" if "ts_utc" in clocks else "FALSE"
    c = lambda name, cast="VARCHAR": col(run, "node_events", name, cast)  # noqa: E731
    rows = frame(run, f"SELECT {c('global_rank', 'BIGINT')} AS rank, coalesce({c('node')}, {c('host')}) AS node, "
                      f"coalesce({', '.join(clocks)}) AS ts, {utc} AS utc, {c('kind')} AS kind, {c('code')} AS code, "
                      f"{c('meaning')} AS meaning, {c('device')} AS device, {c('pid', 'BIGINT')} AS pid FROM node_events "
                      f"WHERE coalesce({', '.join(clocks)}) IS NOT NULL AND coalesce({c('kind')}, '') NOT IN ({skip})")
    # a kernel line that names a process (the OOM killer's victim) is on that rank's lane too
    by_pid = {}
    if {"pid", "node", "rank"} <= set(run.columns("ranks")):
        by_pid = {(n, p): r for r, n, p in frame(run, "SELECT rank, node, pid FROM ranks WHERE pid IS NOT NULL "
                                                     "AND rank IS NOT NULL").iter_rows()}
    out = []
    for r in rows.iter_rows(named=True):
        if r["rank"] is None and r["pid"] is not None:
            r["rank"] = by_pid.get((r["node"], r["pid"]))
        ts = r["ts"]
        if not r["utc"] and r["node"] in offsets:
            ts = ts - timedelta(seconds=float(offsets[r["node"]]))
        name = "Xid " + str(r["code"]) if r["kind"] == "xid" else (r["kind"] or "kernel event").replace("_", " ")
        what = name + (f" ({r['meaning']})" if r["meaning"] else "") + (f" {r['device']}" if r["device"] else "")
        out.append(Mark(ts, r["rank"], r["node"], r["kind"] or "node", what))
    return out


def steps_times(run) -> list[tuple[datetime, int | None]]:
    if not timed(run, "iterations"):
        return []
    rows = frame(run, f"SELECT DISTINCT ts, {col(run, 'iterations', 'iteration', 'BIGINT')} AS it FROM iterations "
                      f"WHERE ts IS NOT NULL AND NOT coalesce({col(run, 'iterations', 'validation', 'BOOLEAN')}, false) "
                      "ORDER BY ts")
    return list(rows.iter_rows())


def first_mark(marks: list[Mark], kinds: tuple[str, ...]) -> Mark | None:
    found = [m for m in marks if m.kind in kinds]
    return min(found, key=lambda m: (m.ts, m.rank if m.rank is not None else -1)) if found else None


class Moments:
    """The times the per-rank picture centres on, also the TUI's go-to keys (Timeline and Logs):
    ``first_failure``, the first timeout or error of a rank (a ``Mark``, or None);
    ``hang_start``, the last sign of progress before the job stood still (None when it did not:
    no stall longer than two minutes or three steps before the first failure or the end of the
    logs); ``last_step`` (time, iteration) at or before then; ``last_advance``, the last c10d
    status line whose completed counter had moved; ``step_s``, the median step time; ``end``
    and ``first_log``, the logs' bounds."""

    def __init__(self, first_failure, hang_start, last_step, last_advance, step_s, end, first_log):
        self.first_failure, self.hang_start, self.last_step = first_failure, hang_start, last_step
        self.last_advance, self.step_s, self.end, self.first_log = last_advance, step_s, end, first_log

    @property
    def anchor(self) -> datetime:
        """Where the picture centres: the hang's start, else the first failure, else the last step."""
        fail_ts = self.first_failure.ts if self.first_failure else None
        return self.hang_start or fail_ts or (self.last_step[0] if self.last_step else self.end)


def moments(run, marks: list[Mark] | None = None, steps: list | None = None) -> Moments | None:
    """The run's ``Moments`` (None when nothing has a time); ``marks`` and ``steps`` when the
    caller has read them already (``marks``, ``steps_times``)."""
    from postmortem.analyzer.timeline import log_bounds

    marks = read_marks(run) if marks is None else marks
    steps = steps_times(run) if steps is None else steps
    if not marks and not steps:
        return None
    first_info, end_info = log_bounds(run)
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
    moved = last_advance(run, until)
    start = max([t for t in (last_step[0] if last_step else None, moved) if t is not None], default=None)
    stall = (until - start).total_seconds() if start else 0.0
    hung = start is not None and stall > max(120.0, 3 * (step_s or 0))
    return Moments(first_fail, start if hung else None, last_step, moved, step_s, end,
                   first_info["ts"] if first_info else None)


def last_advance(run, until: datetime) -> datetime | None:
    """The last c10d status line, at or before ``until``, whose completed counter had moved since
    the line before it (of the same rank and process group)."""
    if not timed(run, "progress") or not {"rank", "last_completed"} <= set(run.columns("progress")):
        return None
    pg = f"coalesce({col(run, 'progress', 'pg_desc')}, {col(run, 'progress', 'pg_id', 'VARCHAR')}::VARCHAR, '?')"
    # per group, the first line that shows its final completed count (counters only grow): one
    # aggregate, not a window over what can be millions of status lines
    rows = frame(run, f"""
        SELECT max(t) AS t FROM (
            SELECT arg_min(ts, struct_pack(c := -last_completed, ts := ts)) AS t,
                   min(last_completed) < max(last_completed) AS moved
            FROM progress WHERE ts IS NOT NULL AND last_completed IS NOT NULL AND ts <= ?::TIMESTAMP
            GROUP BY rank, {pg}) WHERE moved""", [until])
    return rows[0, 0] if not rows.is_empty() else None
