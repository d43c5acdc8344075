"""The Perfetto export: a Chrome/Perfetto trace of the last minutes of a store.

``perfetto(con, ...)`` -> a Chrome Trace Event Format document (``{"traceEvents": [...],
"displayTimeUnit": "ms"}``) that Perfetto (ui.perfetto.dev, trace processor) and
chrome://tracing open: one *process* per node, one *thread* per rank (plus a "node" thread
for kernel/Xid/NIC events, extra threads per rank for its process groups, GPU streams and
NVTX ranges, and a "job" process for the scheduler). What goes in:

* training iterations (``iterations``) as step slices: from the previous logged step (or the
  printed iteration time) to the line that reported it;
* collectives: the watchdog/blocking-wait timeouts (``collectives``) as a slice from enqueue
  (detection time minus ``ran for``) to the timeout, or an instant where the start is
  unknown; Flight Recorder entries with their created/started/completed times; and from the
  periodic PG status lines (``progress``) the stretches in which a rank's counters did not
  move: *waiting in #N* (enqueued > completed: the rank is inside collective N) or *no
  progress after #N* (nothing pending: the rank never entered the next one);
* NCCL WARN lines, exceptions and other understood events (``events``), torchrun exits and
  agent signals, checkpoint saves (a slice where the duration is known), Slurm lines and the
  job's span, kernel/Xid/NIC events (``node_events``) on the node thread;
* profiler kernels and NVTX ranges (``kernels``, ``nvtx`` from nsys exports / Kineto traces).

Every row comes from the timeline reader (``postmortem.views.timeline``: its frame readers and
wording helpers); this module only turns rows into trace events and lays them out.

Times: ``node_events.ts_utc`` where the store has it (postmortem.analyzer.clocks: zone and per-node clock
offset applied); log times minus the node's clock offset from ``node_clocks`` (the same
correction ts_utc carries); profiler times as recorded (UTC). Lines without a time of their
own (tracebacks, NCCL WARNs) take the time of the nearest earlier timed line of the same file
(``time_inferred`` in the event's args). Trace time 0 is the start of the window; every
event's args hold its wall time (``at``).

A full 10,000-rank trace does not fit in a browser: the export covers a window (default: the
last 30 minutes before the end of the logs), optionally a set of ranks, and at most
``max_events`` events (errors and timeouts first, then collective states, steps, NVTX,
kernels; the latest first within each). Output is deterministic: the same store gives the
same bytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import polars as pl

from postmortem.export.common import ExportError
from postmortem.views import timeline
from postmortem.views.render import clip

DEFAULT_WINDOW_MIN = 30.0
DEFAULT_MAX_EVENTS = 250_000

# Categories, by priority when the cap is hit (lower is kept first).
PRIORITY = {"error": 0, "timeout": 0, "exit": 0, "node": 0, "job": 0, "nccl_warn": 0,
            "collective": 1, "progress": 1, "watchdog": 1, "checkpoint": 2, "step": 2, "event": 2,
            "nvtx": 3, "kernel": 4}
_ERROR_KIND = re.compile(r"exception|traceback|error|terminate|fault|oom|signal|abort|nan|inf_|killed|fail")
_WATCHDOG_KIND = re.compile(r"timeout|watchdog|heartbeat|desync|fingerprint|barrier|dump|fr_trace|mismatch")

JOB_PID = 1
RANK_TID_BASE = 100_000
LANES_PER_RANK = 100


def parse_ranks(text: str) -> set[int]:
    """'0-7,17' -> {0, ..., 7, 17}; ValueError on anything else."""
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ValueError(f"bad rank range {part!r} (use e.g. 0-7,17)")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ValueError(f"bad rank range {part!r}: {hi} < {lo}")
        if hi - lo > 10_000_000:
            raise ValueError(f"rank range {part!r} is too large")
        out.update(range(lo, hi + 1))
    if not out:
        raise ValueError("no ranks given")
    return out


def parse_time(text: str, reference: datetime | None) -> datetime:
    """An ISO date-time (``2026-07-24T14:00:00``, ``2026-07-24 14:00``) or a time of day
    (``14:00[:05]``) on the day of ``reference`` (the end of the logs)."""
    text = text.strip()
    if re.fullmatch(r"\d{1,2}:\d{2}(:\d{2}(\.\d+)?)?", text):
        if reference is None:
            raise ValueError(f"{text!r}: a time of day needs a store with timed lines")
        t = datetime.strptime(text.split(".")[0], "%H:%M:%S" if text.count(":") == 2 else "%H:%M").time()
        return datetime.combine(reference.date(), t)
    try:
        value = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"cannot read time {text!r} (use 2026-07-24T14:00:00 or 14:00)") from None
    return _naive_utc(value)  # the store's times are naive (UTC-corrected or as logged)


def _naive_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        return value
    return value.replace(tzinfo=None) - (value.utcoffset() or timedelta(0))


def _iso(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    base = datetime(1970, 1, 1) + timedelta(seconds=secs)
    text = base.strftime("%Y-%m-%dT%H:%M:%S")
    return text + (f".{rem:09d}".rstrip("0") if rem else "")


def _short(text, limit: int = 90) -> str:
    return clip(" ".join(str(text or "").split()), limit)


def _clean(value):
    """JSON-safe arg values (no NaN, no datetimes)."""
    if value is None:
        return None
    if isinstance(value, float):
        return None if value != value or value in (float("inf"), float("-inf")) else round(value, 6)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


@dataclass
class Event:
    t: int                  # start, epoch ns
    dur: int | None         # ns; None = instant
    name: str
    cat: str
    rank: int | None = None
    node: str | None = None
    track: str = ""         # "" = the rank's own thread (or the node/job thread)
    args: dict = field(default_factory=dict)
    scope: str = "t"
    job: bool = False       # on the job process

    @property
    def end(self) -> int:
        return self.t + (self.dur or 0)


def _src(row: dict, paths: dict[int, str]) -> str | None:
    iid, line = row.get("input_id"), row.get("line_no")
    if iid is None:
        return None
    return f"{paths.get(iid, iid)}:{line}" if line is not None else str(paths.get(iid, iid))


def _base_args(row: dict, paths: dict[int, str]) -> dict:
    args = {"source": _src(row, paths)}
    if row.get("t_inferred") is not None:
        args["time_inferred"] = f"no time on this line: time of line {row['t_inferred']} of the same file"
    return args


# --- sources: the timeline reader's rows as trace events -------------------------------------

def _iterations(store, clock, paths, lo, hi) -> list[Event]:
    df = timeline.step_rows(store, clock)
    if df is None:
        return []
    out = []
    train = df.filter(~pl.col("validation") & (pl.col("t") >= lo))
    for r in train.iter_rows(named=True):
        if r["t"] > hi:
            continue
        start = None
        if r["elapsed_ms"] is not None and r["elapsed_ms"] > 0:
            start = r["t"] - int(r["elapsed_ms"] * 1e6)
            if r["prev"] is not None:
                start = max(start, r["prev"])
        elif r["prev"] is not None:
            start = r["prev"]
        args = _base_args(r, paths) | {k: _clean(r[k]) for k in ("iteration", "elapsed_ms", "lm_loss", "grad_norm",
                                                                    "throughput_tflops", "tokens_per_s", "mfu_pct")
                                        if r[k] is not None}
        name = f"iteration {r['iteration']}" if r["iteration"] is not None else "iteration"
        if start is None:
            out.append(Event(r["t"], None, name, "step", r["rank"], r["node"], args=args))
        else:
            out.append(Event(start, r["t"] - start, name, "step", r["rank"], r["node"], args=args))
    for r in df.filter(pl.col("validation") & pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        out.append(Event(r["t"], None, f"validation at iteration {r['iteration']}", "step", r["rank"], r["node"],
                         args=_base_args(r, paths) | {"lm_loss": _clean(r["lm_loss"])}))
    return out


def _progress(store, clock, paths, lo, hi) -> list[Event]:
    """Stretches where a rank's PG counters did not move, and the watchdog's status lines."""
    got = timeline.progress_stretches(store, clock)
    if got is None:
        return []
    runs, signals = got
    out = []
    for r in runs.filter((pl.col("end") >= lo) & (pl.col("start") <= hi)).iter_rows(named=True):
        waiting = r["enq"] > r["comp"]
        if waiting:
            seq = f"#{r['comp'] + 1}" + (f"..#{r['enq']}" if r["enq"] > r["comp"] + 1 else "")
            name = f"{r['pg']}: waiting in {seq}"
        else:
            name = f"{r['pg']}: no progress after #{r['comp']} (nothing pending)"
        args = _base_args(r, paths) | {
            "process_group": r["pg"], "last_enqueued": r["enq"], "last_completed": r["comp"],
            "status_lines": r["n"], "last_line": r["last_line"],
            "meaning": ("enqueued but not completed: the rank is inside this collective, waiting for peers"
                        if waiting else "nothing enqueued after the last completed collective: the rank did not "
                                        "reach the next collective of this group (or the group was idle)")}
        out.append(Event(r["start"], r["end"] - r["start"], name, "progress", r["rank"], r["node"],
                         track=f"pg:{r['pg']}", args=args))
    for r in signals.filter(pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        if r["kind"] == "pg_status":
            name = timeline.watchdog_failure_text(r["pg"], r["failing_seq"])
        else:
            name = timeline.dump_signal_text(r["pg"], r["detector_rank"])
        out.append(Event(r["t"], None, name, "watchdog", r["rank"], r["node"], track=f"pg:{r['pg']}",
                         args=_base_args(r, paths) | {"last_enqueued": r["last_enqueued"],
                                                      "last_completed": r["last_completed"]}))
    return out


def _collectives(store, clock, paths, lo, hi) -> list[Event]:
    """Timeouts (enqueue -> timeout) and Flight Recorder entries; profiler kernel rows come
    from ``kernels`` instead."""
    out = []
    logged = timeline.collective_lines(store, clock)
    for r in [] if logged is None else logged.iter_rows(named=True):
        pg = timeline.pg_name(r["pg_desc"], r["pg_id"])
        op = (r["op"] or "collective").upper()
        seq = f" #{r['seq']}" if r["seq"] is not None else ""
        args = _base_args(r, paths) | {k: r[k] for k in ("kind", "seq", "op", "numel_in", "numel_out", "timeout_ms",
                                                          "ran_for_ms") if r[k] is not None} | {"process_group": pg}
        waited = r["ran_for_ms"] if r["ran_for_ms"] is not None else r["timeout_ms"]
        if r["kind"] in ("watchdog_timeout", "blocking_wait_timeout"):
            name = f"{op}{seq} timed out"
            if waited is not None:
                if r["ran_for_ms"] is None:
                    args["start"] = "approximate: detection time minus Timeout(ms) (no 'ran for' on the line)"
                start = r["t"] - int(waited) * 1_000_000
                if r["t"] >= lo and start <= hi:
                    out.append(Event(start, r["t"] - start, f"{name} after {waited / 1000:g} s", "timeout",
                                     r["rank"], r["node"], track=f"pg:{pg}", args=args))
            elif lo <= r["t"] <= hi:
                out.append(Event(r["t"], None, name, "timeout", r["rank"], r["node"], track=f"pg:{pg}", args=args))
        elif lo <= r["t"] <= hi:
            out.append(Event(r["t"], None, f"{r['kind'] or 'collective'}: {op}{seq}", "collective", r["rank"],
                             r["node"], track=f"pg:{pg}", args=args))
    for r in timeline.flight_recorder(store):
        t0, t1, pg = r["t0"], r["t1"], r["pg"]
        name = f"FR {(r['op'] or '?').upper()} #{r['seq']} ({r['state'] or '?'})"
        args = _base_args(r, paths) | {"state": r["state"], "seq": r["seq"], "process_group": pg}
        if t1 is not None and t1 >= t0 and t1 >= lo and t0 <= hi:
            out.append(Event(t0, t1 - t0, name, "collective", r["rank"], r["node"], track=f"fr:{pg}", args=args))
        elif t1 is None and lo <= t0 <= hi:
            out.append(Event(t0, None, name + ", not completed", "collective", r["rank"], r["node"],
                             track=f"fr:{pg}", args=args))
    return out


def _events(store, clock, paths, lo, hi) -> list[Event]:
    df = timeline.event_rows(store, clock)
    out = []
    for r in [] if df is None else df.iter_rows(named=True):
        kind = r["kind"] or "event"
        args = _base_args(r, paths) | {"kind": kind, "message": _short(r["message"], 2000)}
        for k in ("level", "exc_type", "detail", "path", "iteration", "duration_s"):
            if r[k] is not None:
                args[k] = _clean(r[k])
        if "checkpoint" in kind:
            cat = "checkpoint"
            name = kind.replace("_", " ") + (f" (iteration {r['iteration']})" if r["iteration"] is not None else "")
            if r["duration_s"] is not None and r["duration_s"] > 0 and "save" in kind:
                start = r["t"] - int(r["duration_s"] * 1e9)
                if r["t"] >= lo and start <= hi:
                    out.append(Event(start, r["t"] - start, name, cat, r["rank"], r["node"], args=args))
                continue
        elif _ERROR_KIND.search(kind):
            cat = "error"
            what = (r["exc_type"] or "").rsplit(".", 1)[-1] or r["detail"] or r["message"]
            name = f"{kind}: {_short(what, 70)}"
        elif _WATCHDOG_KIND.search(kind):
            cat = "watchdog"
            name = f"{kind}: {_short(r['detail'] or r['message'], 70)}"
        else:
            cat = "event"
            name = f"{kind}: {_short(r['detail'] or r['message'], 70)}"
        if lo <= r["t"] <= hi:
            out.append(Event(r["t"], None, name, cat, r["rank"], r["node"], args=args))
    return out


def _nccl_warns(store, clock, paths, lo, hi) -> list[Event]:
    df = timeline.nccl_warn_rows(store, clock)
    out = []
    for r in [] if df is None else df.filter(pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        text = r["text"] or ""
        msg = text.split("NCCL WARN", 1)[-1].strip() if "NCCL WARN" in text else text
        args = _base_args(r, paths) | {"line": _short(text, 2000), "kind": r["kind"], "host": r["host"],
                                       "pid": r["pid"], "cuda_dev": r["cuda_dev"]}
        out.append(Event(r["t"], None, f"NCCL WARN {_short(msg, 70)}", "nccl_warn", r["rank"], r["node"], args=args))
    return out


def _exits(store, clock, paths, lo, hi) -> list[Event]:
    out = []
    df = timeline.exit_rows(store, clock)
    for r in [] if df is None else df.filter(pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        sig = f" ({r['signal']})" if r["signal"] else ""
        root = ", root cause" if r["root_cause"] else ""
        out.append(Event(r["t"], None, f"process exit code {r['exitcode']}{sig}{root}", "exit", r["rank"],
                         r["node"] or r["host"], args=_base_args(r, paths) | {
                             k: r[k] for k in ("exitcode", "signal", "local_rank", "pid") if r[k] is not None}))
    # the agent's lines are the launcher's, not a rank's: on the rank whose worker pid the line
    # names, else on the node thread
    ag = timeline.agent_rows(store, clock)
    for r in [] if ag is None else ag.filter(pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        worker = r["worker"]
        args = _base_args(r, paths) | {k: r[k] for k in ("kind", "signal", "exitcode", "pid", "local_rank")
                                       if r[k] is not None}
        if worker is None and r["rank"] is not None:
            args["rank_in_store"] = r["rank"]
        name = f"torchrun: {timeline.words(r['kind'], 'agent')}" + (f" ({r['signal']})" if r["signal"] else "") \
            + (f", exit {r['exitcode']}" if r["exitcode"] is not None else "")
        out.append(Event(r["t"], None, name, "exit", worker, None if worker is not None else r["node"], args=args))
    return out


def _scheduler(store, clock, paths, lo, hi) -> list[Event]:
    out = []
    sl = timeline.slurm_rows(store, clock)
    for r in [] if sl is None else sl.filter(pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        bits = [x for x in (r["host"], r["tasks"], r["reason"],
                            f"exit {r['exit_code']}" if r["exit_code"] is not None else None) if x]
        name = f"slurm: {timeline.words(r['kind'], 'slurm')}" + (f" ({r['reason']})" if r["reason"] else "")
        out.append(Event(r["t"], None, name, "job", job=True, scope="g" if r["kind"] == "cancelled" else "t",
                         args=_base_args(r, paths) | {"detail": "; ".join(map(str, bits)), "job_id": r["job_id"]}))
    for r in timeline.job_spans(store):
        t0, t1 = r["t0"], r["t1"]
        args = _base_args(r, paths) | {k: r[k] for k in ("job_id", "name", "state", "reason", "source") if r[k]}
        args["start"], args["end"] = _iso(t0), _iso(t1) if t1 is not None else None
        label = f"job {r['job_id']} ({r['state'] or '?'})"
        if t1 is not None and t1 >= t0 and t1 >= lo and t0 <= hi:
            out.append(Event(t0, t1 - t0, label, "job", job=True, args=args))
        elif t1 is None and lo <= t0 <= hi:
            out.append(Event(t0, None, label + " started", "job", job=True, args=args))
    return out


def _node_events(store, clock, paths, lo, hi) -> list[Event]:
    df = timeline.node_event_rows(store, clock)
    out = []
    for r in [] if df is None else df.filter(pl.col("t").is_between(lo, hi)).iter_rows(named=True):
        name = _short(timeline.node_event_text(r["kind"], r["code"], r["meaning"], r["device"]), 90)
        args = _base_args(r, paths) | {k: _clean(r[k]) for k in ("kind", "code", "category", "meaning", "device", "pci",
                                                                  "gpu_index", "global_rank", "ts_basis",
                                                                  "order_confidence") if r[k] is not None}
        args["message"] = _short(r["message"], 2000)
        out.append(Event(r["t"], None, name, "node", None, r["node"], args=args))
    return out


def _profiles(store, lo, hi, limit: int) -> tuple[list[Event], int]:
    """Kernels and NVTX ranges of profiler inputs (nsys, Kineto), latest first up to ``limit``;
    returns the events and how many more the window held."""
    out, dropped = [], 0
    got = timeline.kernel_rows(store, lo, hi, limit)
    if got is not None:
        df, total = got
        dropped += max(0, total - len(df))
        for r in df.iter_rows(named=True):
            name = (f"{r['op']}" if r["is_nccl"] and r["op"] else _short(r["name"], 80)) or "kernel"
            args = {k: _clean(r[k]) for k in ("name", "collective", "op", "dtype", "algo", "proto", "bytes", "seq",
                                              "pg", "device", "pid", "source") if r[k] is not None}
            args["at"] = _iso(r["t0"])
            out.append(Event(r["t0"], max(0, r["t1"] - r["t0"]), name, "kernel", r["rank"], r["host"],
                             track=f"gpu:{r['stream'] if r['stream'] is not None else '?'}", args=args))
    got = timeline.nvtx_rows(store, lo, hi, limit - len(out)) if limit - len(out) > 0 else None
    if got is not None:
        df, total = got
        dropped += max(0, total - len(df))
        for r in df.iter_rows(named=True):
            args = {"domain": r["domain"], "pid": r["pid"], "tid": r["tid"], "at": _iso(r["t0"])}
            dur = None if r["t1"] is None else max(0, r["t1"] - r["t0"])
            out.append(Event(r["t0"], dur, _short(r["text"], 80) or "nvtx", "nvtx", r["rank"], None,
                             track=f"nvtx:{r['tid'] if r['tid'] is not None else '?'}", args=args))
    return out, dropped


# --- the trace -----------------------------------------------------------------------------

@dataclass
class Window:
    lo: int
    hi: int
    end_of_logs: int | None
    how: str


def window(store: timeline.Store, clock: timeline.Clock, start: str | None = None, end: str | None = None,
           last_min: float | None = None) -> Window:
    eol = timeline.end_of_logs(store, clock)
    ref = datetime(1970, 1, 1) + timedelta(microseconds=eol // 1000) if eol is not None else None
    if start is None and end is None:
        if eol is None:
            raise ExportError("the store has no timed lines: nothing to put on a timeline")
        minutes = DEFAULT_WINDOW_MIN if last_min is None else last_min
        span = int(minutes * 60e9)
        how = (f"the last {minutes:g} minutes before the end of the logs ({_iso(eol)})"
               + (" (the default; see --last, --from/--to)" if last_min is None else ""))
        return Window(eol - span, eol, eol, how)
    try:
        hi = timeline.epoch_ns(parse_time(end, ref)) if end else None
        lo = timeline.epoch_ns(parse_time(start, ref)) if start else None
    except ValueError as exc:
        raise ExportError(str(exc)) from None
    if hi is None:
        if eol is None:
            raise ExportError("--from without --to needs a store with timed lines")
        hi = max(eol, lo)
    if lo is None:
        lo = hi - int(DEFAULT_WINDOW_MIN * 60e9)
    if hi <= lo:
        raise ExportError(f"empty window: --to {_iso(hi)} is not after --from {_iso(lo)}")
    return Window(lo, hi, eol, f"{_iso(lo)} to {_iso(hi)}")


def _allocate(events: list[Event]) -> dict[int, int]:
    """Lane per X event (index -> lane) so that slices on one thread nest: a slice that
    partly overlaps another moves to the next lane of its track."""
    lanes: dict[int, int] = {}
    by_track: dict[tuple, list[int]] = {}
    for i, e in enumerate(events):
        if e.dur is not None:
            by_track.setdefault((e.job, e.node, e.rank, e.track), []).append(i)
    for idxs in by_track.values():
        idxs.sort(key=lambda i: (events[i].t, -events[i].dur, events[i].name))
        stacks: list[list[int]] = []
        for i in idxs:
            e = events[i]
            for lane, stack in enumerate(stacks):
                while stack and stack[-1] <= e.t:
                    stack.pop()
                if not stack or e.end <= stack[-1]:
                    stack.append(e.end)
                    lanes[i] = lane
                    break
            else:
                stacks.append([e.end])
                lanes[i] = len(stacks) - 1
    return lanes


def _track_label(track: str) -> tuple[int, str]:
    """Sort group and readable name of a rank's extra thread."""
    kind, _, name = track.partition(":")
    return {"pg": (1, f"{name}"), "fr": (2, f"flight recorder {name}"), "gpu": (3, f"GPU stream {name}"),
            "nvtx": (4, f"NVTX tid {name}")}.get(kind, (5, track))


def perfetto(con, start: str | None = None, end: str | None = None, last_min: float | None = None,
             ranks: set[int] | None = None, max_events: int = DEFAULT_MAX_EVENTS,
             messages: list[str] | None = None) -> dict:
    """The Chrome trace document for a window of the store (see the module docstring)."""
    messages = messages if messages is not None else []
    store = timeline.Store(con)
    clock = timeline.Clock(store)
    win = window(store, clock, start, end, last_min)
    lo, hi = win.lo, win.hi
    paths = timeline.input_paths(store)
    rank_node = timeline.rank_nodes(store)[0]
    job_id = timeline.job_id(store)

    events: list[Event] = []
    for source in (_iterations, _progress, _collectives, _events, _nccl_warns, _exits, _scheduler, _node_events):
        events += source(store, clock, paths, lo, hi)
    prof, prof_dropped = _profiles(store, lo, hi, max_events)
    events += prof

    # placement: the rank's node from ``ranks``; --ranks keeps those ranks, their nodes' node
    # threads and the job process
    for e in events:
        if e.rank is not None and rank_node.get(e.rank):
            e.node = rank_node[e.rank]
    if ranks is not None:
        nodes_kept = {rank_node.get(r) for r in ranks} - {None}
        nodes_kept |= {e.node for e in events if e.rank in ranks and e.node}
        events = [e for e in events if e.job or (e.rank in ranks if e.rank is not None else e.node in nodes_kept)]

    # clip to the window
    kept = []
    for e in events:
        if e.dur is None:
            if lo <= e.t <= hi:
                kept.append(e)
            continue
        if e.end < lo or e.t > hi:
            continue
        e.args.setdefault("at", _iso(e.t))
        if e.dur is not None:
            e.args.setdefault("until", _iso(e.end))
        if e.t < lo or e.end > hi:
            e.args["clipped"] = "the slice extends past the window; at/until are its real bounds"
            t0, t1 = max(e.t, lo), min(e.end, hi)
            e.t, e.dur = t0, t1 - t0
        kept.append(e)
    for e in kept:
        e.args.setdefault("at", _iso(e.t))
        if e.rank is not None:
            e.args.setdefault("rank", e.rank)
    events = kept

    # cap: most important first, latest first within a category
    def order(e: Event):
        return (PRIORITY.get(e.cat, 2), -e.end, e.rank if e.rank is not None else -1, e.node or "", e.track,
                e.t, e.name)

    dropped = prof_dropped
    if len(events) > max_events:
        events.sort(key=order)
        dropped += len(events) - max_events
        events = events[:max_events]
    if dropped:
        messages.append(f"capped at {max_events} events: {dropped} more in the window were left out (profiler "
                        f"kernels/NVTX first, then steps, the oldest first); narrow it with --last, --from/--to or "
                        f"--ranks, or raise --max-events")

    # processes and threads
    nodes = sorted({e.node for e in events if not e.job and e.node} | {rank_node.get(e.rank) for e in events
                                                                        if e.rank in rank_node} - {None})
    has_unknown = any(not e.job and not e.node for e in events)
    pid_of = {n: JOB_PID + 1 + i for i, n in enumerate(nodes)}
    unknown_pid = JOB_PID + 1 + len(nodes)
    lanes = _allocate(events)
    threads: dict[tuple[int, int], str] = {}
    slot_of: dict[tuple, dict[tuple, int]] = {}
    rows = []
    for i, e in enumerate(events):
        lane = lanes.get(i, 0)
        if e.job:
            pid, tid, tname = JOB_PID, JOB_PID, "scheduler"
        else:
            pid = pid_of.get(e.node, unknown_pid) if e.node else unknown_pid
            if e.rank is None:
                tid, tname = pid, "node (kernel, Xid, NIC, launcher)"
                if lane:
                    tid, tname = pid * 1000 + lane, f"node ({lane + 1})"
            else:
                key = (e.track, lane)
                slots = slot_of.setdefault((pid, e.rank), {})
                slots.setdefault(("", 0), -1)  # every rank shown has its own thread, first
                slots.setdefault(key, -1)  # numbered below, once every track of the rank is known
                tid, tname = None, None
        rows.append([e, pid, tid, tname, lane])
    # number each rank's threads: main first, then process groups, FR, GPU streams, NVTX
    tid_map: dict[tuple, int] = {}
    for (pid, rank), slots in slot_of.items():
        ordered = sorted(slots, key=lambda k: ((0, "") if k[0] == "" else _track_label(k[0]), k[1]))
        for n, key in enumerate(ordered):
            slot = min(n, LANES_PER_RANK - 1)
            tid_map[(pid, rank, key)] = RANK_TID_BASE + rank * LANES_PER_RANK + slot
    for (pid, rank), slots in slot_of.items():
        threads[(pid, tid_map[(pid, rank, ("", 0))])] = f"rank {rank}"
    for row in rows:
        e, pid, tid, tname, lane = row
        if tid is None:
            row[2] = tid_map[(pid, e.rank, (e.track, lane))]
            label = "" if e.track == "" else " \u00b7 " + _track_label(e.track)[1]
            row[3] = f"rank {e.rank}{label}" + (f" ({lane + 1})" if lane else "")
        threads.setdefault((pid, row[2]), row[3])

    out = []
    pnames = {JOB_PID: f"job {job_id}" if job_id else "job"} | {p: n for n, p in pid_of.items()}
    if has_unknown:
        pnames[unknown_pid] = "(no node)"
    used_pids = {pid for pid, _ in threads} | {JOB_PID}
    for pid in sorted(used_pids):
        out.append({"ph": "M", "name": "process_name", "pid": pid, "tid": 0 if pid != JOB_PID else JOB_PID,
                    "args": {"name": pnames.get(pid, f"pid {pid}")}})
        out.append({"ph": "M", "name": "process_sort_index", "pid": pid, "tid": 0 if pid != JOB_PID else JOB_PID,
                    "args": {"sort_index": pid}})
    for (pid, tid), name in sorted(threads.items()):
        out.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": name}})
        out.append({"ph": "M", "name": "thread_sort_index", "pid": pid, "tid": tid, "args": {"sort_index": tid}})
    body = []
    for e, pid, tid, _, _ in rows:
        ev = {"name": e.name, "cat": e.cat, "ph": "X" if e.dur is not None else "i", "ts": _us(e.t - lo),
              "pid": pid, "tid": tid, "args": {k: _clean(v) for k, v in sorted(e.args.items()) if v is not None}}
        if e.dur is not None:
            ev["dur"] = _us(e.dur)
        else:
            ev["s"] = e.scope
        body.append(ev)
    body.sort(key=lambda ev: (ev["ts"], ev["pid"], ev["tid"], -ev.get("dur", 0), ev["ph"], ev["name"],
                              json.dumps(ev["args"], sort_keys=True)))
    # metadata events referenced by tid 0 (process-level) are fine in Perfetto; keep them for pid naming
    meta = {
        "generator": "postmortem export perfetto",
        "job": job_id,
        "window": win.how,
        "window_start": _iso(lo), "window_end": _iso(hi),
        "end_of_logs": _iso(win.end_of_logs) if win.end_of_logs is not None else None,
        "time_zero": f"trace time 0 = {_iso(lo)}; every event's args.at is its wall time",
        "clocks": ("log times minus the node's clock offset (node_clocks.offset_s); kernel/Xid events at "
                   "node_events.ts_utc; profiler kernels as recorded (UTC)"),
        "ranks": None if ranks is None else _rank_text(ranks),
        "events": len(body), "events_left_out": dropped, "max_events": max_events,
    }
    return {"traceEvents": out + body, "displayTimeUnit": "ms", "otherData": meta}


def _rank_text(ranks: set[int]) -> str:
    from postmortem.analyzer.ranges import rank_ranges

    return rank_ranges(ranks)


def _us(ns: int):
    """ns -> µs for the trace: an int when whole, else three decimals."""
    if ns % 1000 == 0:
        return ns // 1000
    return round(ns / 1000, 3)


def dumps(doc: dict) -> str:
    """Deterministic JSON text of a trace document (one event per line for diffable output)."""
    head = json.dumps({k: v for k, v in doc.items() if k != "traceEvents"}, sort_keys=True, ensure_ascii=False)
    events = ",\n".join(json.dumps(e, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
                        for e in doc["traceEvents"])
    return "{\"traceEvents\": [\n" + events + "\n], " + head[1:] + "\n"
