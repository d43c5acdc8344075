"""What the crash rules (X001, X003-X009) share: exit codes and signals explained, the failures
of one attempt with their times on one clock, and kills from outside joined to ranks.

Not a rule (no code in its name). Every function takes a ``Context``; those whose work is
repeated are ``@memoised`` (``postmortem.rules.base``).

Exit codes come in three spellings for the same death:

* torchrun's table and ``failed (exitcode: -9)``: a negative number is "killed by signal N"
  (Python's ``Popen.returncode``);
* a shell, ``srun``'s task summary, Kubernetes and ``docker``: ``128 + N`` (137 = SIGKILL,
  143 = SIGTERM, 134 = SIGABRT, 139 = SIGSEGV, 135 = SIGBUS);
* Slurm's ``ExitCode`` field ``E:S``: exit status ``E`` and, after the colon, the signal that
  ended the step (``0:9`` = SIGKILL, ``0:15`` = SIGTERM, ``1:0`` = a plain exit 1).

Times: a failure's time is on the clock of the node that printed it. ``node_clocks`` gives each
node's offset from the reference (subtract it) and a confidence; the uncertainty of an ordering
is the sum of both sides' clock uncertainty and the time's own granularity (torchrun stamps a
failure with the whole second of the agent's poll, up to ``monitor_interval`` after the death).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import polars as pl

from postmortem.rules.base import Context, memoised, with_columns

SIGNAL_NAMES = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
                11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}
SIGNAL_MEANING = {
    "SIGKILL": "killed from outside the process (SIGKILL cannot be caught): the kernel OOM killer, a cgroup limit, "
               "the scheduler or an operator, or the launcher's forced kill after SIGTERM",
    "SIGTERM": "asked to stop (SIGTERM): the launcher tearing the job down after another worker failed, or the "
               "scheduler (scancel, time limit, preemption)",
    "SIGABRT": "aborted itself (SIGABRT): typically the c10d watchdog's std::abort after a collective timeout or an "
               "NCCL error, or a C++ assertion",
    "SIGSEGV": "crashed with a segmentation fault (SIGSEGV) in native code: an extension, a driver or a library bug",
    "SIGBUS": "crashed with a bus error (SIGBUS): often /dev/shm too small (DataLoader workers, NCCL SHM) or a file "
              "truncated under an mmap",
    "SIGILL": "crashed on an illegal instruction (SIGILL): a binary built for another CPU",
    "SIGFPE": "crashed with an arithmetic fault (SIGFPE): an integer division by zero in native code",
    "SIGINT": "interrupted (SIGINT, Ctrl-C)",
}

# Reference-clock uncertainty per node_clocks confidence, in seconds.
CLOCK_UNCERTAINTY_S = {"high": 0.5, "medium": 1.0, "low": 2.0}
UNKNOWN_CLOCK_S = 3.0

# An exception (or error line) a rank raises *because* another process went away or stalled.
CONSEQUENCE = ("Connection closed by peer", "Connection reset", "Timed out waiting", "connectFullMesh",
               "Watchdog caught collective operation timeout", "remote process exited", "ncclRemoteError",
               "communicator was aborted", "NCCL communicator", "DistBackendError", "Broken pipe", "TCPStore",
               "SignalException", "ChildFailedError", "ProcessGroupNCCL is aborted", "should dump",
               "recvValue failed", "sendBytes failed", "Socket Timeout", "DistNetworkError", "DistStoreError",
               "heartbeat", "Heartbeat", "Detected mismatch between collectives", "failed to pass monitoredBarrier",
               "successfully reached monitoredBarrier")


def signal_of(code: int | None, basis: str = "torchrun") -> str | None:
    """The signal a death code stands for: negative (torchrun), 128+N (shell, srun, k8s)."""
    if code is None:
        return None
    if basis == "torchrun" and code < 0:
        return SIGNAL_NAMES.get(-code, f"signal {-code}")
    if code > 128 and code - 128 in SIGNAL_NAMES:
        return SIGNAL_NAMES[code - 128]
    return None


def explain_exit(code: int | None, basis: str = "torchrun", short: bool = False) -> str:
    """One phrase that says what an exit code means, e.g. ``exit code -9 = SIGKILL (...)``."""
    if code is None:
        return "no exit code recorded"
    sig = signal_of(code, basis)
    if sig is None:
        if code == 1:
            return "exit code 1 (a Python exception, or sys.exit(1))"
        return f"exit code {code}"
    spelled = f"-{-code}" if code < 0 else f"{code} = 128 + {code - 128}"
    if short:
        return f"exit code {spelled} = {sig}"
    return f"exit code {spelled} = {sig}: {SIGNAL_MEANING.get(sig, 'killed by a signal')}"


def is_consequence(message: str | None) -> bool:
    return bool(message) and any(m in message for m in CONSEQUENCE)


@dataclass
class Failure:
    """One rank's end, as the evidence shows it."""

    rank: int
    node: str | None
    exitcode: int | None
    signal: str | None
    t: datetime | None                 # on the reference clock (node offset removed)
    uncertainty_s: float               # +- on t: clock and granularity
    how: str                           # killed | exception | cuda | signal | timeout | teardown | exit
    intrinsic: bool                    # the failure started on this rank (not a reaction to another)
    message: str = ""
    evidence: list[tuple[int, int, str]] = field(default_factory=list)   # (input_id, line_no, note)
    order_basis: str = ""


def node_clock(ctx: Context, node: str | None) -> tuple[float, float, str]:
    """(offset_s to subtract, uncertainty_s, confidence) of a node's clock."""
    return _node_clocks(ctx).get(node, (0.0, UNKNOWN_CLOCK_S, "none"))


@memoised
def _node_clocks(ctx: Context) -> dict[str, tuple[float, float, str]]:
    """``node_clock`` of every node in ``node_clocks``, read once per context (postmortem.rules ask it
    per failure and per rank: 20,000 times in a 10,000-rank run)."""
    clocks = ctx.table("node_clocks")
    known: dict[str, tuple[float, float, str]] = {}
    if not clocks.is_empty() and "node" in clocks.columns:
        for r in clocks.iter_rows(named=True):
            conf = r.get("confidence") or "none"
            if r["node"] is not None and r["node"] not in known:   # the first row, as before
                known[r["node"]] = (float(r.get("offset_s") or 0.0),
                                    CLOCK_UNCERTAINTY_S.get(conf, UNKNOWN_CLOCK_S), conf)
    return known


def _short(host: str | None) -> str | None:
    return host.split(".")[0] if host else host


def _rank_nodes(ctx: Context) -> dict[int, str]:
    ranks = ctx.ranks
    if ranks.is_empty():
        return {}
    return {r: n for r, n in zip(ranks["rank"].to_list(), ranks["node"].to_list()) if r is not None and n is not None}


def monitor_interval(ctx: Context) -> float:
    agent = with_columns(ctx.table("agent"), value=pl.String)  # only key/value lines of the agent fill value
    if not agent.is_empty() and "key" in agent.columns:
        rows = agent.filter(pl.col("key") == "monitor_interval")["value"].to_list()
        for v in rows:
            try:
                return float(v)
            except (TypeError, ValueError):
                continue
    return 5.0


@memoised
def rank_exceptions(ctx: Context) -> dict[int, dict]:
    """Each rank's first exception or CUDA fault (intrinsic ones first), with its line."""
    events = ctx.table("events")
    out: dict[int, dict] = {}
    if not events.is_empty() and {"rank", "kind"} <= set(events.columns):
        rows = events.filter(pl.col("rank").is_not_null() & pl.col("kind").is_in(
            ["exception", "python_traceback", "cuda_fault", "signal", "faulthandler"])).sort("input_id", "line_no")
        caught = caught_lines(ctx)
        for row in rows.iter_rows(named=True):
            if (row["input_id"], row["line_no"]) in caught:
                continue  # logged and survived (logging.exception): not this rank's failure
            text = " ".join(str(row.get(c) or "") for c in ("exc_type", "message", "detail"))
            cand = {"input_id": row["input_id"], "line_no": row["line_no"], "kind": row["kind"],
                    "message": (row.get("message") or row.get("detail") or "").strip(), "ts": row.get("ts"),
                    "node": row.get("node"), "cuda": row["kind"] == "cuda_fault", "detail": row.get("detail"),
                    "consequence": is_consequence(text)}
            have = out.get(row["rank"])
            if have is None or (have["consequence"] and not cand["consequence"]) or (cand["cuda"] and not have["cuda"]
                                                                                     and not cand["consequence"]):
                out[row["rank"]] = cand
    return out


@memoised
def watchdog_ranks(ctx: Context) -> set[int]:
    """Ranks with a line of the c10d watchdog or heartbeat monitor (their SIGABRT is its abort)."""
    events = ctx.table("events")
    kinds = ["watchdog_exception", "teardown", "heartbeat_timeout", "watchdog_stuck", "fr_dump", "nccl_error"]
    ranks = set(timed_out_ranks(ctx))
    if {"kind", "rank"} <= set(events.columns):
        ranks |= set(events.filter(pl.col("kind").is_in(kinds))["rank"].drop_nulls().to_list())
    return ranks


@memoised
def caught_lines(ctx: Context) -> set[tuple[int, int]]:
    """(input_id, line_no) of errors the job ran past (``postmortem.analyzer.outcome.caught_errors``): a
    caught traceback's header and exception lines."""
    from postmortem.analyzer.outcome import caught_errors

    rows = caught_errors(ctx.run, ctx.attempt)
    return {(i, ln) for i, a, b in rows.iter_rows() for ln in (a, b) if ln is not None}


@memoised
def timed_out_ranks(ctx: Context) -> dict[int, datetime | None]:
    """Ranks whose own watchdog (or gloo/store wait) timed out, with the earliest such time."""
    out: dict[int, datetime | None] = {}
    for name, kinds in (("collectives", ["watchdog_timeout"]), ("events", ["watchdog_timeout", "gloo_error"])):
        t = ctx.table(name)
        if t.is_empty() or not {"rank", "kind"} <= set(t.columns):
            continue
        rows = t.lazy().filter(pl.col("kind").is_in(kinds) & pl.col("rank").is_not_null())
        if name == "events" and "detail" in t.columns:
            gloo_wait = pl.col("detail").fill_null("").str.contains("Timed out")
            rows = rows.filter((pl.col("kind") != "gloo_error") | gloo_wait)
        rows = rows.select("rank", "ts" if "ts" in t.columns else pl.lit(None).alias("ts")).collect(engine="in-memory")
        for rank, ts in rows.iter_rows():
            prev = out.get(rank)
            if rank not in out or (ts is not None and (prev is None or ts < prev)):
                out[rank] = ts
    return out


@memoised
def failures(ctx: Context) -> list[Failure]:
    """Every rank's failure in this attempt, from torchrun's tables, srun's task lines, the
    exceptions the ranks printed and the kernel's OOM kills."""
    nodes = _rank_nodes(ctx)
    raised = rank_exceptions(ctx)
    timed_out = timed_out_ranks(ctx)
    kills = {k["rank"]: k for k in oom_kills(ctx) if k.get("rank") is not None}
    interval = monitor_interval(ctx)
    by_rank: dict[int, Failure] = {}
    # A failure table without a timestamp column (older torchrun) has no "time".
    exits = with_columns(ctx.table("exits"), time=pl.Datetime("us"))
    if not exits.is_empty() and "exitcode" in exits.columns and "root_cause" in exits.columns:
        rows = exits.filter(pl.col("rank").is_not_null() & (pl.col("exitcode").fill_null(1) != 0))
        for row in rows.sort("time", "line_no", nulls_last=True).iter_rows(named=True):
            rank, code = row["rank"], row["exitcode"]
            node = nodes.get(rank) or _short(row.get("host"))
            offset, unc, _ = node_clock(ctx, node)
            t = row["time"] - timedelta(seconds=offset) if row.get("time") else None
            f = _classify(rank, node, code, row.get("signal") or signal_of(code), t, unc + 1.0 + interval,
                          raised.get(rank), rank in timed_out, kills.get(rank), rank in watchdog_ranks(ctx))
            f.evidence.append((row["input_id"], row["line_no"],
                               "torchrun: first observed failure" if row["root_cause"] else "torchrun failure table"))
            f.order_basis = "torchrun failure time (whole second of the agent's poll)"
            if rank not in by_rank or _earlier(f, by_rank[rank]):
                by_rank[rank] = f
    for f in _srun_failures(ctx, nodes, raised, timed_out, kills):
        if f.rank not in by_rank:
            by_rank[f.rank] = f
    # A rank that printed an intrinsic exception but whose exit no table recorded.
    for rank, exc in raised.items():
        if rank in by_rank or exc["consequence"]:
            continue
        node = nodes.get(rank) or exc.get("node")
        offset, unc, _ = node_clock(ctx, node)
        t = exc["ts"] - timedelta(seconds=offset) if exc.get("ts") else None
        f = _classify(rank, node, None, None, t, unc, exc, rank in timed_out, kills.get(rank))
        f.order_basis = "the time of the rank's exception line"
        by_rank[rank] = f
    # The kernel's kill time is exact: prefer it for the killed rank.
    for rank, kill in kills.items():
        f = by_rank.get(rank)
        if f is None:
            f = Failure(rank, kill["node"], None, "SIGKILL", None, UNKNOWN_CLOCK_S, "killed", True)
            by_rank[rank] = f
        if kill.get("t") is not None:
            f.t, f.uncertainty_s = kill["t"], kill["uncertainty_s"]
            f.order_basis = "kernel OOM-killer time (node_events.ts_utc)"
    out = sorted(by_rank.values(), key=lambda f: (f.t is None, f.t or datetime.max, f.rank))
    return out


def _earlier(a: Failure, b: Failure) -> bool:
    if a.intrinsic != b.intrinsic:
        return a.intrinsic
    return a.t is not None and (b.t is None or a.t < b.t)


def _classify(rank, node, code, signal, t, unc, exc, timed_out, kill, watchdog: bool = True) -> Failure:
    if kill is not None or signal == "SIGKILL":
        how, intrinsic = "killed", True
    elif signal == "SIGTERM":
        how, intrinsic = "teardown", False
    elif timed_out or (exc is not None and exc["consequence"]):
        how, intrinsic = "timeout" if timed_out else "reaction", False
    elif exc is not None:
        how, intrinsic = ("cuda" if exc["cuda"] else "exception"), True
    elif signal is not None:
        # A SIGABRT is the c10d watchdog's abort only when a watchdog line of this rank says so
        # (the timeout case is above); otherwise the rank aborted on its own (terminate, assert).
        how, intrinsic = "signal", signal != "SIGABRT" or not watchdog
    else:
        how, intrinsic = "exit", True
    message = exc["message"] if exc is not None else ""
    f = Failure(rank, node, code, signal, t, unc, how, intrinsic, message)
    if exc is not None and intrinsic and how in ("cuda", "exception"):
        f.evidence.append((exc["input_id"], exc["line_no"], "its exception"))
    return f


def _srun_failures(ctx: Context, nodes: dict[int, str], raised, timed_out, kills) -> list[Failure]:
    """``srun: error: host: task 5: Killed`` lines, where srun's tasks are the ranks (one task per GPU)."""
    slurm = ctx.table("slurm")
    if slurm.is_empty() or "kind" not in slurm.columns:
        return []
    rows = slurm.filter(pl.col("kind") == "task_exit")
    exits = ctx.table("exits")
    if rows.is_empty() or (not exits.is_empty() and "root_cause" in exits.columns):
        return []   # torchrun's own tables say more (srun's tasks are then the node agents)
    parsed = []
    for row in rows.sort("input_id", "line_no").iter_rows(named=True):
        try:
            parsed.append((row, _task_list(row.get("tasks") or "")))
        except (ValueError, TypeError):
            return []
    # srun's tasks are the ranks only when every task line names ranks of its own host
    if not all(tasks and all(nodes.get(t) == _short(row.get("host")) for t in tasks) for row, tasks in parsed):
        return []
    out = []
    for row, tasks in parsed:
        host = _short(row.get("host"))
        reason = row.get("reason") or ""
        code = row.get("exit_code")
        signal = "SIGKILL" if "Killed" in reason else "SIGTERM" if "Terminated" in reason else \
            "SIGABRT" if "Aborted" in reason else "SIGSEGV" if "Segmentation" in reason else None
        for task in tasks:
            _, unc, _ = node_clock(ctx, host)
            f = _classify(task, host, code, signal, None, unc, raised.get(task), task in timed_out, kills.get(task))
            f.evidence.append((row["input_id"], row["line_no"], "srun: the task's end"))
            f.order_basis = "srun's order of task lines (no time)"
            out.append(f)
    return out


def _task_list(text: str) -> list[int]:
    """srun's ``0-1,3`` task list."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


@memoised
def oom_kills(ctx: Context) -> list[dict]:
    """The kernel's OOM kills (host or cgroup) with the killed pid joined to a rank."""
    ev = ctx.table("node_events")
    out: list[dict] = []
    if not ev.is_empty() and "kind" in ev.columns:
        ranks = ctx.ranks
        by_pid = {}
        if not ranks.is_empty() and "pid" in ranks.columns:
            by_pid = {(n, p): r for r, n, p in ranks.select("rank", "node", "pid").iter_rows() if p is not None}
        kills = ev.filter(pl.col("kind") == "oom_kill").sort(pl.col("ts_utc").is_null(), "ts_utc", "input_id",
                                                             "line_no")
        seen = set()
        for row in kills.iter_rows(named=True):
            node, pid = row.get("node"), row.get("pid")
            if (node, pid) in seen:
                continue   # the same kill in dmesg and in the journal
            seen.add((node, pid))
            constraint = ev.filter((pl.col("kind") == "oom_constraint") & pl.col("node").eq_missing(node)
                                   & pl.col("pid").eq_missing(pid))
            memcg = (row.get("code") == "CONSTRAINT_MEMCG" or "Memory cgroup" in (row.get("message") or "")
                     or (not constraint.is_empty() and constraint["code"][0] == "CONSTRAINT_MEMCG"))
            rank = row.get("global_rank")
            if rank is None:
                rank = by_pid.get((node, pid))
            if rank is None:
                rank = next((r for (n, p), r in by_pid.items() if p == pid and n is None), None)
            conf = row.get("order_confidence")
            unc = {"high": 0.5, "medium": 1.0}.get(conf, UNKNOWN_CLOCK_S)
            out.append({"node": node, "pid": pid, "process": row.get("process"), "rank": rank, "cgroup": memcg,
                        "t": row.get("ts_utc"), "uncertainty_s": unc, "order_confidence": conf,
                        "input_id": row["input_id"], "line_no": row["line_no"], "message": row.get("message")})
    return out


def first_failure(ctx: Context) -> tuple[Failure | None, list[Failure], list[Failure]]:
    """(the first intrinsic failure, those indistinguishable from it in time, the rest)."""
    fails = failures(ctx)
    intrinsic = [f for f in fails if f.intrinsic]
    if not intrinsic:
        return None, [], fails
    timed = [f for f in intrinsic if f.t is not None]
    first = timed[0] if timed else intrinsic[0]
    tied = []
    for f in intrinsic:
        if f is first:
            continue
        if f.t is None or first.t is None:
            if first.t is None:
                tied.append(f)      # no times at all: nothing orders them
            continue
        if abs((f.t - first.t).total_seconds()) <= f.uncertainty_s + first.uncertainty_s:
            tied.append(f)
    rest = [f for f in fails if f is not first and f not in tied]
    return first, tied, rest


def first_timeout(ctx: Context) -> datetime | None:
    """When the first waiting rank's watchdog fired (reference clock)."""
    nodes = _rank_nodes(ctx)
    best = None
    for rank, ts in timed_out_ranks(ctx).items():
        if ts is None:
            continue
        offset, _, _ = node_clock(ctx, nodes.get(rank))
        t = ts - timedelta(seconds=offset)
        best = t if best is None or t < best else best
    return best
