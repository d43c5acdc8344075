"""What happened to the job -- completed, failed, hung or unknown -- decided from the evidence
alone, before and independently of the rules that explain why.

A rule can miss a cause; the outcome must not miss a failure. So the outcome reads every sign
that a job ended badly or well, each a ``Sign`` with its line:

* ``failed``: a torchrun failure table or a worker the agent saw fail, a scheduler state of
  FAILED / CANCELLED / TIMEOUT / NODE_FAIL / OUT_OF_MEMORY / PREEMPTED / BOOT_FAIL / DEADLINE
  (or a ``slurmstepd`` cancellation), an uncaught Python traceback, ``terminate called ...``,
  ``Fatal Python error``, a fatal signal, a watchdog timeout or abort, a rendezvous error, an
  NCCL WARN with an error class;
* ``completed``: the scheduler's COMPLETED, torchrun's "worker group successfully finished",
  every rank at its last step (``iteration N/N``);
* ``hung``: progress stopped with no end recorded -- py-spy dumps taken of live workers, a
  watchdog that says it is stuck, ``Flight Recorder`` dump signals -- and no failure or end.

A traceback is *caught* (``logging.exception``: the job ran on) when the same input shows
training progress after it, or the rank reached its last step and nothing else failed; a
caught traceback is not a failure. Anything else with no sign at all is ``unknown``.

``rank_tails`` gives each rank's first failure and last lines: what the report shows when a
job failed and no rule could say why ("failed, cause not determined").
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import polars as pl

from postmortem.parsers import nccl_errors
from postmortem.parsers.base import groups_of

SCHEDULER_FAILED = ("FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL",
                    "DEADLINE", "OOMKilled", "Error")
SCHEDULER_EXTERNAL = ("CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE")
# 128 + signal or -signal: SIGINT, SIGKILL, SIGTERM (the agent's or the scheduler's stop, not the rank's own end)
EXTERNAL_EXIT_CODES = (-2, -9, -15, 130, 137, 143)
SCHEDULER_DONE = ("COMPLETED", "Succeeded", "Completed")
# Event kinds that end a rank (or the job) whatever came after them.
FATAL_EVENTS = {
    "terminate": "terminate called (a C++ exception ended the process)",
    "faulthandler": "Fatal Python error",
    "signal": "a fatal signal",
    "watchdog_exception": "the c10d watchdog ended the process",
    "teardown": "the c10d watchdog took the process down",
    "heartbeat_timeout": "the c10d heartbeat monitor timed out",
    "rendezvous_error": "the rendezvous failed",
    "store_barrier_timeout": "the store-based barrier timed out",
    "monitored_barrier": "a rank failed to pass monitoredBarrier",
}
# Events that are failures unless the rank is shown to have run on (a caught, logged error).
MAYBE_CAUGHT = {
    "python_traceback": "an uncaught Python traceback",
    "gloo_error": "a gloo error",
    "nccl_error": "an NCCL error",
    "cuda_oom": "a CUDA out-of-memory error",
    "cuda_fault": "a CUDA error",
    "nccl_warn": "an NCCL WARN with an error class",
    "store_error": "a TCPStore error",
}
# Parsers of training progress (a line of these is the rank running on).
PROGRESS_KINDS = ("megatron", "deepspeed", "hf_trainer", "titan_lightning", "trainlog")
STALL_EVENTS = {"watchdog_stuck": "the watchdog reports it is stuck", "fr_dump": "a Flight Recorder dump was asked for"}
# Kinds whose rows are failures only when their message says so (the same kind also holds
# progress or harmless lines): (kind, a substring of the message, what it means).
FAILING_MESSAGES = [
    ("store_barrier", "Timed out", "the store-based barrier timed out"),
    ("watchdog_stuck", "got stuck for", "the heartbeat monitor found the watchdog stuck and aborts the process"),
    ("fingerprint_mismatch", "", "TORCH_DISTRIBUTED_DEBUG=DETAIL found a collective mismatch"),
]


@dataclass(frozen=True)
class Sign:
    """One piece of evidence of how the job ended. Frozen: the signs are read once per run and
    attempt and handed to every caller as they are (``all_signs``)."""

    says: str               # failed | completed | hung
    what: str               # a phrase: "torchrun failure table: rank 3 exitcode -6"
    kind: str               # the table row's kind (exit, scheduler, python_traceback, ...)
    input_id: int | None = None
    line_no: int | None = None
    rank: int | None = None
    node: str | None = None
    ts: object = None
    external: bool = False  # an end imposed from outside (time limit, scancel, SIGTERM/SIGKILL), not the job's own


def job_outcome(run, attempt: int | None = None) -> dict:
    """``{"outcome": ..., "basis": [sign, ...], "failed_ranks": [...]}`` for one attempt (all
    attempts when ``attempt`` is None). ``basis`` lists the signs that decided it, surest first."""
    signs = all_signs(run, attempt)
    failed = [s for s in signs if s.says == "failed"]
    done = [s for s in signs if s.says == "completed"]
    hung = [s for s in signs if s.says == "hung"]
    if failed and all(s.external for s in failed) and (hung or _stalled_before(run, attempt, failed)):
        # Stuck first, then ended from outside (the time limit, scancel): the job hung.
        outcome, basis = "hung", hung + _stall_sign(run, attempt, failed) + failed
    elif failed:
        outcome, basis = "failed", failed
    elif done:
        outcome, basis = "completed", done
    elif hung:
        outcome, basis = "hung", hung
    else:
        outcome, basis = "unknown", []
    ends = sorted((s for s in basis if s.external), key=lambda s: "job state" not in s.what)  # the state says most
    ended = ends[0].what if outcome == "hung" and ends else None
    return {"outcome": outcome, "basis": [asdict(s) for s in basis[:12]], "ended_by": ended,
            "failed_ranks": sorted({s.rank for s in failed if s.rank is not None}),
            "progress": not _rows(run, "iterations", attempt, "", ("line_no",)).is_empty()}


def all_signs(run, attempt: int | None) -> list[Sign]:
    """Every sign of how ``attempt`` ended, the launcher's first. Read once per run and attempt
    (the outcome, the crash rules and each rank's first failure ask); each caller gets a list of
    its own, of the same signs (frozen: copying each of the 10,000-rank run's 46,610 signs for
    each caller took 0.2-0.4 s)."""
    return list(run.derived(("all_signs", attempt), lambda: _all_signs(run, attempt)))


def _all_signs(run, attempt: int | None) -> list[Sign]:
    finished = _finished_ranks(run, attempt)
    signs = (_launcher_signs(run, attempt) + _scheduler_signs(run, attempt) + _event_signs(run, attempt, finished)
             + _message_signs(run, attempt)
             + _watchdog_signs(run, attempt) + _completion_signs(run, attempt, finished) + _stall_signs(run, attempt)
             + _bench_signs(run, attempt))
    order = {"exit_root": 0, "exit": 1, "scheduler": 2, "worker_failed": 3}
    return sorted(signs, key=lambda s: (order.get(s.kind, 3), s.ts is None, str(s.ts or ""), s.input_id or 0,
                                        s.line_no or 0))


def _rows(run, table: str, attempt: int | None, where: str = "", columns: tuple[str, ...] = ()) -> pl.DataFrame:
    """Rows of ``table`` in ``attempt`` with ``columns`` (missing ones as NULL); empty if no table."""
    have = set(run.columns(table))
    if not have:
        return pl.DataFrame()
    cols = ", ".join(f'"{c}"' if c in have else f'NULL AS "{c}"' for c in columns) or "*"
    conds = [where] if where else []
    if attempt is not None and "attempt" in have:
        conds.append(f"(attempt = {int(attempt)} OR attempt IS NULL)")
    sql = f'SELECT {cols} FROM "{table}"' + (" WHERE " + " AND ".join(conds) if conds else "")
    return run.frame(sql)


_WHERE = ("input_id", "line_no", "rank", "node")


def _sign(says: str, what: str, kind: str, row: dict, ts_col: str = "ts", external: bool = False) -> Sign:
    return Sign(says, what, kind, row.get("input_id"), row.get("line_no"), row.get("rank"), row.get("node"),
                row.get(ts_col), external)


def _launcher_signs(run, attempt) -> list[Sign]:
    out = []
    if "exitcode" in run.columns("exits"):
        exits = _rows(run, "exits", attempt, "exitcode IS DISTINCT FROM 0",
                      (*_WHERE, "exitcode", "signal", "host", "time", "root_cause"))
        for r in exits.iter_rows(named=True):
            who = f"rank {r['rank']}" if r["rank"] is not None else "a worker"
            code = f"exitcode {r['exitcode']}" if r["exitcode"] is not None else "no exit code"
            root = " (its root cause)" if r["root_cause"] else ""
            out.append(_sign("failed", f"torchrun failure table: {who} {code}{root}",
                             "exit_root" if r["root_cause"] else "exit", r, "time",
                             external=r["exitcode"] in EXTERNAL_EXIT_CODES))
    if "kind" in run.columns("agent"):
        agent = _rows(run, "agent", attempt, "kind IN ('worker_failed', 'death_signal', 'force_kill')",
                      (*_WHERE, "kind", "exitcode", "ts", "local_rank"))
        for r in agent.iter_rows(named=True):
            what = {"worker_failed": f"torchrun: a worker failed (exitcode {r['exitcode']})",
                    "death_signal": "torchrun received a death signal",
                    "force_kill": "torchrun force-killed a worker"}[r["kind"]]
            out.append(_sign("failed", what, r["kind"], r,
                             external=r["kind"] != "worker_failed" or r["exitcode"] in EXTERNAL_EXIT_CODES))
    return out


def _scheduler_signs(run, attempt) -> list[Sign]:
    out = []
    if "state" in run.columns("job"):
        job = _rows(run, "job", attempt, "state IS NOT NULL", (*_WHERE, "state", "exit_code", "end", "source"))
        for r in job.iter_rows(named=True):
            state = str(r["state"])
            if state.startswith(SCHEDULER_FAILED):
                out.append(_sign("failed", f"scheduler ({r['source']}): job state {state}", "scheduler", r, "end",
                                 external=state.startswith(SCHEDULER_EXTERNAL)))
            elif state.startswith(SCHEDULER_DONE):
                out.append(_sign("completed", f"scheduler ({r['source']}): job state {state}", "scheduler_done", r,
                                 "end"))
    if "kind" in run.columns("slurm"):
        for r in _rows(run, "slurm", attempt, "", (*_WHERE, "kind", "ts")).iter_rows(named=True):
            out.append(_sign("failed", f"slurmstepd: {str(r['kind']).replace('_', ' ')}", "scheduler", r,
                             external=r["kind"] in ("cancelled", "stepd_terminated", "step_aborted")))
    return out


def _finished_ranks(run, attempt) -> set:
    """Ranks whose last iteration line reached the run's planned last step (``iteration N/N``)."""
    cols = set(run.columns("iterations"))
    if not {"iteration", "train_iters", "rank"} <= cols:
        return set()
    it = _rows(run, "iterations", attempt, "iteration IS NOT NULL", ("rank", "iteration", "train_iters"))
    if it.is_empty():
        return set()
    last = it.group_by("rank").agg(pl.col("iteration").max(), pl.col("train_iters").max())
    done = last.filter(pl.col("train_iters").is_not_null() & (pl.col("iteration") >= pl.col("train_iters")))
    return set(done["rank"].to_list())


def _event_signs(run, attempt, finished: set) -> list[Sign]:
    cols = set(run.columns("events"))
    if "kind" not in cols:
        return []
    kinds = list(FATAL_EVENTS) + list(MAYBE_CAUGHT) + list(STALL_EVENTS)
    in_list = ", ".join(f"'{k}'" for k in kinds)
    ev = _rows(run, "events", attempt, f"kind IN ({in_list})",
               (*_WHERE, "kind", "ts", "exc_type", "detail", "error_class", "exc_line_no", "message"))
    if ev.is_empty():
        return []
    ev = _drop_caught(run, attempt, ev, finished)
    out = []
    # A plain NCCL WARN (no error class), one NCCL prints on healthy hosts too (no libibverbs) or
    # one inside a traceback is not a failure of its own.
    quiet = ["other", *sorted({c.error_class for c in nccl_errors.CAUSES if c.role == "harmless"})]
    ev = ev.filter((pl.col("kind") != "nccl_warn") | ~pl.col("error_class").fill_null("other").is_in(quiet))
    for r in ev.filter(~pl.col("kind").is_in(list(STALL_EVENTS))).iter_rows(named=True):
        label = FATAL_EVENTS.get(r["kind"]) or MAYBE_CAUGHT[r["kind"]]
        detail = r["exc_type"] or r["detail"] or ""
        what = f"{label}" + (f" ({_short(detail)})" if detail else "")
        # torchrun's SignalException / a KeyboardInterrupt: the traceback of a stop sent from outside
        out.append(_sign("failed", what, r["kind"], r,
                         external=any(x in detail for x in ("SignalException", "KeyboardInterrupt"))))
    for r in ev.filter(pl.col("kind").is_in(list(STALL_EVENTS))).iter_rows(named=True):
        out.append(_sign("hung", STALL_EVENTS[r["kind"]], r["kind"], r))
    return out


def _message_signs(run, attempt) -> list[Sign]:
    out = []
    for kind, text, what in FAILING_MESSAGES:
        rows = _rows(run, "events", attempt, f"kind = '{kind}' AND contains(coalesce(message, ''), '{text}')",
                     (*_WHERE, "ts")) if "message" in run.columns("events") else pl.DataFrame()
        out += [_sign("failed", what, kind, r) for r in rows.iter_rows(named=True)]
    return out


def _drop_caught(run, attempt, ev: pl.DataFrame, finished: set) -> pl.DataFrame:
    """Drop maybe-caught errors that the job ran past (``caught_errors``)."""
    caught = caught_errors(run, attempt, ev, finished)
    if caught.is_empty():
        return ev
    return ev.join(caught.select("input_id", "line_no"), on=["input_id", "line_no"], how="anti")


def caught_errors(run, attempt, ev: pl.DataFrame | None = None, finished: set | None = None) -> pl.DataFrame:
    """Maybe-caught errors (tracebacks, gloo/NCCL/CUDA errors) that the job ran past: the same
    rank printed a line of its own (a training line or the script's own print, not an error
    line) later in the same input, the job reached its last step and no launcher or
    scheduler failure was recorded, or the traceback ended a thread, not the process. Columns input_id, line_no, exc_line_no: crash rules drop
    these lines too (``postmortem.rules.crash.crash_model``)."""
    if ev is None:
        kinds = ", ".join(f"'{k}'" for k in MAYBE_CAUGHT)
        ev = _rows(run, "events", attempt, f"kind IN ({kinds})", (*_WHERE, "kind", "exc_line_no")) \
            if "kind" in run.columns("events") else pl.DataFrame()
    if finished is None:
        finished = _finished_ranks(run, attempt)
    if ev.is_empty():
        return pl.DataFrame(schema={"input_id": pl.Int64, "line_no": pl.Int64, "exc_line_no": pl.Int64})
    maybe = ev.filter(pl.col("kind").is_in(list(MAYBE_CAUGHT)))
    end = pl.coalesce("exc_line_no", "line_no")
    ran_on = pl.lit(False)
    later = _own_lines(run, attempt)
    if not later.is_empty():
        maybe = maybe.join(later, on=["input_id", "rank"], how="left", nulls_equal=True)
        ran_on = pl.col("_last_own").fill_null(0) > end
    job_done = bool(finished) and not _launcher_signs(run, attempt) and not _scheduler_signs(run, attempt)
    maybe = maybe.with_columns(pl.col("input_id").cast(pl.Int64), pl.col("line_no").cast(pl.Int64))
    maybe = maybe.join(_thread_tracebacks(run), on=["input_id", "line_no"], how="left")
    caught = maybe.filter(ran_on | pl.lit(job_done) | pl.col("_in_thread").fill_null(False))
    return caught.select(pl.col("input_id").cast(pl.Int64), pl.col("line_no").cast(pl.Int64),
                         pl.col("exc_line_no").cast(pl.Int64))


def _thread_tracebacks(run) -> pl.DataFrame:
    """Tracebacks printed under ``Exception in thread NAME:``: Python's threading ended that
    thread only, not the process (its main thread may then wait forever: a hang, not a crash).
    Read once per run (a scan of every line)."""
    return run.derived(("thread_tracebacks",), lambda: _read_thread_tracebacks(run))


def _read_thread_tracebacks(run) -> pl.DataFrame:
    if "text" not in run.columns("lines"):
        return pl.DataFrame(schema={"input_id": pl.Int64, "line_no": pl.Int64, "_in_thread": pl.Boolean})
    rows = run.frame("""SELECT input_id, line_no + 1 AS line_no FROM lines
                        WHERE starts_with(ltrim(coalesce(text, '')), 'Exception in thread ')""")
    return rows.select(pl.col("input_id").cast(pl.Int64), pl.col("line_no").cast(pl.Int64), _in_thread=pl.lit(True))


def _own_lines(run, attempt) -> pl.DataFrame:
    """Per input and rank, the last line that is the rank's own progress or print: a training
    line or a line no parser claimed (launcher, error and NCCL lines are not). Read once per run
    and attempt (a scan of every line)."""
    return run.derived(("own_lines", attempt), lambda: _read_own_lines(run, attempt))


def _read_own_lines(run, attempt) -> pl.DataFrame:
    have = set(run.columns("lines"))
    if not {"input_id", "line_no", "kind", "rank"} <= have:
        return pl.DataFrame()
    kinds = ", ".join(f"'{k}'" for k in PROGRESS_KINDS)
    att = f" AND (attempt = {int(attempt)} OR attempt IS NULL)" if attempt is not None and "attempt" in have else ""
    text = " AND trim(coalesce(text, '')) <> ''" if "text" in have else ""
    return run.frame(f"""SELECT input_id, rank, max(line_no) AS _last_own FROM lines
                         WHERE (kind IS NULL OR kind IN ({kinds})){text}{att} GROUP BY input_id, rank""")


def _watchdog_signs(run, attempt) -> list[Sign]:
    if "kind" not in run.columns("collectives"):
        return []
    rows = _rows(run, "collectives", attempt, "kind IN ('watchdog_timeout', 'blocking_wait_timeout')",
                 (*_WHERE, "kind", "ts", "op", "seq"))
    out = []
    for r in rows.iter_rows(named=True):
        op = f" in {r['op']}" if r["op"] else ""
        seq = f" #{r['seq']}" if r["seq"] is not None else ""
        out.append(_sign("failed", f"watchdog timeout{op}{seq}", r["kind"], r))
    return out


def _completion_signs(run, attempt, finished: set) -> list[Sign]:
    out = []
    if "kind" in run.columns("agent"):
        ok = _rows(run, "agent", attempt, "kind = 'group_finished'", (*_WHERE, "ts"))
        out += [_sign("completed", "torchrun: worker group successfully finished", "group_finished", r)
                for r in ok.iter_rows(named=True)]
    if finished:
        last = _rows(run, "iterations", attempt, "iteration IS NOT NULL AND iteration >= train_iters",
                     (*_WHERE, "ts", "iteration"))
        if not last.is_empty():
            r = last.sort("line_no").row(-1, named=True)
            named = sorted(r for r in finished if r is not None)
            who = f"ranks {', '.join(map(str, named))}" if len(named) > 1 else f"rank {named[0]}" if named \
                else "an unattributed rank"
            # Trainers often log progress from one rank only: say whose log shows it, not "N ranks".
            out.append(_sign("completed", f"the last step ({r['iteration']}) was reached ({who}'s log)",
                             "last_step", r))
    return out


STALL_S = 600   # progress stopped this long before an external end: the job was stuck, not cut short


def _last_progress(run, attempt):
    if "ts" not in run.columns("iterations"):
        return None
    it = _rows(run, "iterations", attempt, "ts IS NOT NULL", (*_WHERE, "ts"))
    return None if it.is_empty() else it.sort("ts").row(-1, named=True)


def _stalled_before(run, attempt, ends: list[Sign]) -> bool:
    last = _last_progress(run, attempt)
    times = [s.ts for s in ends if s.ts is not None]
    if last is None or not times:
        return False
    try:
        return (min(times) - last["ts"]).total_seconds() >= STALL_S
    except TypeError:
        return False


def _stall_sign(run, attempt, ends: list[Sign]) -> list[Sign]:
    """The last progress line, when the job sat still for a long time before it was ended."""
    if not _stalled_before(run, attempt, ends):
        return []
    last = _last_progress(run, attempt)
    gap = (min(s.ts for s in ends if s.ts is not None) - last["ts"]).total_seconds()
    return [_sign("hung", f"the last progress line, {gap / 3600:.1f} h before the job was ended from outside",
                  "last_progress", last)]


def _stall_signs(run, attempt) -> list[Sign]:
    """py-spy dumps are taken of live processes: someone found the job stuck."""
    if "source" not in run.columns("stacks"):
        return []
    dumps = _rows(run, "stacks", attempt, "source IS DISTINCT FROM 'traceback' AND source IS DISTINCT FROM "
                  "'faulthandler'", (*_WHERE, "source"))
    if dumps.is_empty():
        return []
    first = dumps.sort("input_id", "line_no").row(0, named=True)
    n = dumps.select(pl.struct("input_id").n_unique()).item()
    return [_sign("hung", f"stack dumps of live processes ({n} input(s): py-spy or Flight Recorder)", "stack_dump",
                  first)]


def _bench_signs(run, attempt) -> list[Sign]:
    """nccl-tests that printed its header (``nThread ... nGpus``, ``Using devices``) and neither a
    result row nor its footer (``Avg bus bandwidth``, ``Collective test concluded``): stuck at
    NCCL init or in the first collective (an interrupted paste looks the same, but a finished run
    always prints its rows)."""
    if not {"key", "run"} <= set(run.columns("bench_runs")):
        return []
    runs = _rows(run, "bench_runs", attempt, "key IN ('params', 'devices', 'avg_busbw_gbs', 'test_concluded')",
                 ("input_id", "line_no", "run", "key"))
    if runs.is_empty():
        return []
    done = set()
    if {"run", "input_id"} <= set(run.columns("bench_results")):
        done = set(_rows(run, "bench_results", attempt, "", ("input_id", "run")).unique().rows())
    out = []
    for (input_id, run_id), rows in groups_of(runs, "input_id", "run", maintain_order=True):
        keys = set(rows["key"].to_list())
        if (input_id, run_id) in done or keys & {"avg_busbw_gbs", "test_concluded"} or not keys & {"params", "devices"}:
            continue
        first = rows.sort("line_no").row(0, named=True)
        out.append(_sign("hung", "nccl-tests printed its header but no result row and no end (stuck at NCCL init "
                         "or in the first collective)", "bench_stalled", {**first, "rank": None, "node": None}))
    return out


def _short(text: str, limit: int = 90) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def rank_tails(run, attempt: int | None = None, last: int = 5, limit: int = 64) -> list[dict]:
    """Per rank (first failure first; at most ``limit`` ranks): its first failure, its last
    ``last`` lines (from the input that holds most of its lines: the merged console when there
    is one), its last step and the time of its last timestamped line."""
    have = set(run.columns("lines"))
    if not {"rank", "input_id", "line_no"} <= have:
        return []
    attempt_sql = f" AND (l.attempt = {int(attempt)} OR l.attempt IS NULL)" if attempt is not None and \
        "attempt" in have else ""
    tails = run.frame(f"""
        WITH own AS (
          SELECT rank, input_id, count(*) AS n FROM lines l
          WHERE rank IS NOT NULL AND kind IS DISTINCT FROM 'blank'{attempt_sql} GROUP BY rank, input_id),
        best AS (SELECT rank, arg_max(input_id, struct_pack(n := n, neg := -CAST(input_id AS BIGINT))) AS input_id FROM own GROUP BY rank),
        ranked AS (
          SELECT l.rank, l.input_id, l.line_no, l."offset", l.length, i.path, i.abs_path,
                 row_number() OVER (PARTITION BY l.rank ORDER BY l.line_no DESC) AS k
          FROM lines l JOIN best b ON l.rank = b.rank AND l.input_id = b.input_id JOIN inputs i ON i.input_id = l.input_id
          WHERE l.kind IS DISTINCT FROM 'blank')
        SELECT * FROM ranked WHERE k <= {int(last)} ORDER BY rank, line_no""")
    if tails.is_empty():
        return []
    firsts = first_failures(run, attempt)
    steps = _last_steps(run, attempt)
    paths = dict(run.frame("SELECT input_id, path FROM inputs").iter_rows())
    cache: dict = {}
    out = []
    for rank, rows in groups_of(tails, "rank", maintain_order=True):
        rank = rank[0]
        first = firsts.get(rank)
        out.append({
            "rank": rank,
            "first_failure": None if first is None else {
                "what": first.what, "input_id": first.input_id, "path": paths.get(first.input_id), "line": first.line_no,
                "time": str(first.ts) if first.ts else None},
            "last_lines": [{"path": r["path"], "line": r["line_no"],
                            "text": _text(r, cache)} for r in rows.iter_rows(named=True)],
            "last_step": steps.get(rank, {}).get("iteration"),
            "last_time": str(steps[rank]["ts"]) if steps.get(rank, {}).get("ts") else None,
        })
    out.sort(key=lambda t: (t["first_failure"] is None, (t["first_failure"] or {}).get("time") or "", t["rank"]))
    return out[:limit]


def first_failures(run, attempt: int | None = None) -> dict[int, Sign]:
    """Each rank's first failure: its own error lines before what the launcher said of it
    (the failure table names every rank it tore down), earliest first."""
    def key(s: Sign):
        return (s.kind in ("exit", "exit_root", "worker_failed"), s.ts is None, str(s.ts or ""), s.input_id or 0,
                s.line_no or 0)

    firsts: dict[int, Sign] = {}
    for s in sorted((s for s in all_signs(run, attempt) if s.says == "failed" and s.rank is not None), key=key):
        firsts.setdefault(s.rank, s)
    return firsts


def _last_steps(run, attempt) -> dict:
    if not {"rank", "iteration"} <= set(run.columns("iterations")):
        return {}
    it = _rows(run, "iterations", attempt, "rank IS NOT NULL", ("rank", "iteration", "ts"))
    if it.is_empty():
        return {}
    last = it.group_by("rank").agg(pl.col("iteration").max(), pl.col("ts").max())
    return {r["rank"]: r for r in last.iter_rows(named=True)}


def _text(row: dict, cache: dict) -> str:
    from postmortem.analyzer.store import line_text

    if row.get("abs_path") is None or row.get("offset") is None:
        return ""
    try:
        return line_text(row["abs_path"], row["offset"], row["length"] or 0, cache).rstrip("\r\n")
    except OSError:
        return ""
