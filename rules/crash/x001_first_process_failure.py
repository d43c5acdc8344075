"""X001 first-process-failure: the worker whose failure started the job's end, and the cascade it caused.

What it detects
    The first rank whose failure started on that rank (killed by SIGKILL, an exception, a CUDA
    error, a fatal signal, a bare non-zero exit), found from torchrun's failure tables (one per
    node agent), srun's task lines, the ranks' own exceptions and the kernel's OOM kills, with
    every time put on one clock (``node_clocks`` offsets, ``rules/crash/crash_model.py``). The other
    ranks' ends are the cascade: workers the agent or Slurm stopped with SIGTERM, ranks that
    timed out waiting for the dead one, ranks that raised because a peer went away. The exit
    code is explained (-9 / 137 / Slurm 0:9 = SIGKILL, -15 / 143 = SIGTERM, -6 / 134 = SIGABRT,
    SIGSEGV, SIGBUS, exit 1 after an exception). When two ranks failed closer together than the
    clocks and timestamps can separate, the finding says they were simultaneous, names both and
    does not blame either.

Why it matters
    torchrun's "Root Cause (first observed failure)" is the lowest local rank among the failures
    of one poll of one node's agent, not necessarily the process that died first, and every
    node's agent prints its own table. In a crash, the ranks of the other nodes then time out
    waiting in a collective, which reads like a hang: without ordering the failures the report
    would blame the waiters or the torn-down node mates.

What to do
    Read the named rank's traceback. For SIGKILL, look at the node's kernel log (OOM killer,
    cgroup limit; X004 reports it when the log is there) and the scheduler's record of the job.
    For simultaneous failures, look for a shared cause (a bad input batch, the same code path).

Known false positives
    A rank killed by an operator or the launcher's forced kill (SIGKILL after SIGTERM) before it
    printed anything looks like an external kill; the message says what the evidence shows. In a
    hang (H001-H005), the rule stays quiet unless a failure of its own came before the first
    watchdog timeout by more than the clock uncertainty. A SIGABRT without a traceback is taken
    as the watchdog's abort (a symptom), not as the cause.
"""

from __future__ import annotations

from datetime import datetime

import polars as pl

from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.crash.crash_model import Failure, explain_exit, first_failure, first_timeout, oom_kills, timed_out_ranks
from postmortem.rules.hang.hang_model import analyse_hang

RULE = Rule(code="X001", name="first-process-failure", severity=Severity.ERROR, category=Category.CRASH, since="0.1.0")

SIGNALS = {-9: "SIGKILL", -6: "SIGABRT", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS", -4: "SIGILL", -8: "SIGFPE"}
_HOW = {"teardown": "stopped with SIGTERM (the agent or Slurm tearing the job down)",
        "timeout": "timed out waiting in a collective", "reaction": "raised because a peer went away",
        "killed": "killed by SIGKILL", "exception": "raised an exception", "cuda": "hit a CUDA error",
        "signal": "ended on a signal", "exit": "exited non-zero"}


def check(ctx: Context) -> list[Finding]:
    first, tied, rest = first_failure(ctx)
    if first is None:
        return []
    hang = analyse_hang(ctx)
    if hang.hang_states or hang.culprits:
        t_out = first_timeout(ctx)
        # a hang: the first exit is a waiting rank's timeout (H004 says so), unless this rank failed
        # before anyone timed out
        if first.t is None or t_out is None or (t_out - first.t).total_seconds() <= first.uncertainty_s:
            return []
    kill = next((k for k in oom_kills(ctx) if k.get("rank") == first.rank), None)
    how, confidence = _how(first, kill)
    terminate = _terminate_line(ctx, first) if first.how == "signal" and first.signal == "SIGABRT" else None
    gpu = ctx.gpu_of(first.rank)
    node = first.node or gpu.get("node")
    evidence = [_field_line(ctx, i, n, note) for i, n, note in first.evidence[:2]]
    if terminate is not None:
        how = (f"ended on SIGABRT after 'terminate called {terminate['detail'] or ''}' (C++ std::terminate: "
               "a std::thread destroyed while still joinable, or an exception escaping a noexcept function; "
               "its last lines say where)")
        evidence.insert(0, ctx.evidence(terminate["input_id"], terminate["line_no"], note="its std::terminate"))
    if kill is not None:
        evidence.append(ctx.evidence(kill["input_id"], kill["line_no"], note="kernel log: the OOM killer killed it"))
    cascade = _cascade(ctx, first, [*tied, *rest])
    order, gap = _order(first, tied, rest)
    when = f" at {first.t:%Y-%m-%d %H:%M:%S}" if first.t else ""
    if tied:
        names = sorted({first.rank, *(f.rank for f in tied)})
        who = ", ".join(f"rank {f.rank} ({f.node or '?'}: {_HOW[f.how]}"
                        + (f" at {f.t:%H:%M:%S}" if f.t else "") + ")" for f in [first, *tied])
        message = (f"{len(names)} ranks failed within the clock uncertainty of each other, so the order is not "
                   f"known: {who}; this is a shared cause or an unresolved order, not a single culprit")
        return [RULE.finding(confidence=0.4, title=f"ranks {', '.join(map(str, names))} failed simultaneously",
                        message=message, ranks=names, nodes=sorted({f.node for f in [first, *tied] if f.node}),
                        gpus=[ctx.gpu_of(r) for r in names], evidence=evidence, culprit=False,
                        suggestion="Read each named rank's traceback; look for what they share (input batch, code "
                                   "path, node). Synchronise the node clocks (chrony) to order such failures.",
                        details={"order_confidence": "simultaneous", "first": _row(first),
                                 "simultaneous": [_row(f) for f in tied], "cascade": cascade})]
    torn = [c["rank"] for c in cascade if c["how"] == "teardown"]
    waited = [c["rank"] for c in cascade if c["how"] in ("timeout", "reaction")]
    then = []
    if torn:
        then.append(f"{len(torn)} rank(s) were then stopped with SIGTERM by the agent or Slurm")
    if waited:
        then.append(f"{len(waited)} rank(s) timed out or failed waiting for it")
    code_text = explain_exit(first.exitcode, short=kill is not None or terminate is not None
                             or first.how in ("exception", "cuda"))
    message = (f"rank {first.rank}{f' on {node}' if node else ''} {how}{when} ({code_text}); it failed first "
               f"(order: {order}{f', {gap:.0f} s before the next rank' if gap is not None else ''})"
               + (f"; {'; '.join(then)}" if then else ""))
    if first.how in ("exception", "cuda"):
        suggestion = f"Read rank {first.rank}'s traceback (evidence above)."
    elif first.how == "killed":
        suggestion = (f"Check {node or 'the node'}'s kernel log (dmesg / journalctl -k: OOM killer, cgroup limit) and "
                      "the scheduler's job record (sacct -j JOBID -o State,ExitCode,Reason) for who sent the SIGKILL.")
    else:
        suggestion = f"Look at rank {first.rank}'s last lines and core dump; the exit code says how it ended."
    if order == "low":
        confidence = min(confidence, 0.6)
    return [RULE.finding(confidence=confidence, title=f"rank {first.rank} failed first", message=message, ranks=[first.rank],
                    nodes=[node] if node else [], gpus=[gpu], evidence=evidence, suggestion=suggestion,
                    culprit=True,
                    details={"exitcode": first.exitcode, "signal": first.signal, "how": first.how,
                             "exception": first.message or None, "time": str(first.t) if first.t else None,
                             "order_basis": first.order_basis, "order_confidence": order, "gap_s": gap,
                             "uncertainty_s": first.uncertainty_s, "cascade": cascade,
                             "torn_down_ranks": torn})]


def _terminate_line(ctx: Context, first: Failure) -> dict | None:
    """The rank's own ``terminate called ...`` line, which says why it aborted when no watchdog did."""
    events = ctx.table("events")
    if events.is_empty() or not {"kind", "rank"} <= set(events.columns):
        return None
    rows = events.filter((pl.col("kind") == "terminate") & (pl.col("rank") == first.rank))
    return rows.sort("line_no").row(0, named=True) if not rows.is_empty() else None


def _how(first: Failure, kill: dict | None) -> tuple[str, float]:
    if first.how == "killed":
        if kill is not None:
            what = "a cgroup memory limit" if kill["cgroup"] else "the host"
            return f"was killed by the kernel OOM killer ({what} ran out of memory)", 0.9
        return ("was killed by SIGKILL (from outside the process: the host OOM killer, the scheduler or an "
                "operator)"), 0.7
    if first.how == "cuda":
        return f"hit a CUDA error: {first.message}", 0.85
    if first.how == "exception":
        return f"raised {first.message}", 0.9
    if first.how == "signal":
        return f"ended on {first.signal}", 0.7
    return "exited non-zero without a traceback in the logs", 0.6


def _row(f: Failure) -> dict:
    return {"rank": f.rank, "node": f.node, "how": f.how, "exitcode": f.exitcode, "signal": f.signal,
            "time": str(f.t) if f.t else None}


def _cascade(ctx: Context, first: Failure, rest: list[Failure]) -> list[dict]:
    """Every other rank's end: the failures, the agent's SIGTERMs (pid -> rank) and the timeouts."""
    rows: dict[int, dict] = {}
    for f in rest:
        rows[f.rank] = _row(f)
    for rank, t in timed_out_ranks(ctx).items():
        if rank != first.rank and (rank not in rows or rows[rank]["how"] in ("teardown", "exit", "signal")):
            node = ctx.gpu_of(rank).get("node")
            rows[rank] = {"rank": rank, "node": node, "how": "timeout", "exitcode": rows.get(rank, {}).get("exitcode"),
                          "signal": rows.get(rank, {}).get("signal"), "time": str(t) if t else None}
    # Only some agent lines carry a kind or a time: a run may have neither column.
    agent = with_columns(ctx.table("agent"), kind=pl.String, ts=pl.Datetime("us"))
    if not agent.is_empty() and "pid" in agent.columns and "pid" in ctx.ranks.columns:
        pids: dict[int, list[int]] = {}
        for r, pid in ctx.ranks.select("rank", "pid").iter_rows():
            if pid is not None:
                pids.setdefault(pid, []).append(r)
        for pid, ts in agent.filter(pl.col("kind") == "closing_signal").select("pid", "ts").iter_rows():
            owners = pids.get(pid, [])
            if len(owners) == 1 and owners[0] != first.rank and owners[0] not in rows:
                r = owners[0]
                rows[r] = {"rank": r, "node": ctx.gpu_of(r).get("node"), "how": "teardown", "exitcode": -15,
                           "signal": "SIGTERM", "time": str(ts) if ts else None}
    out = []
    for r in sorted(rows):
        row = rows[r]
        if first.t is not None and row.get("time"):
            try:
                row["after_s"] = round((datetime.fromisoformat(row["time"]) - first.t).total_seconds(), 1)
            except ValueError:
                pass
        out.append(row)
    return out


def _order(first: Failure, tied: list[Failure], rest: list[Failure]) -> tuple[str, float | None]:
    """How sure the order is: the gap to the next failing rank against the combined uncertainty."""
    if first.t is None:
        if not rest:
            return "only failure", None
        # no times (srun's task lines): the only failure of its own, the others stopped after it
        return ("medium" if not any(f.intrinsic for f in rest) else "low"), None
    others = [f for f in rest if f.t is not None and f.rank != first.rank]
    if not others:
        return ("only failure" if not rest else "medium"), None
    nxt = min(others, key=lambda f: f.t)
    gap = (nxt.t - first.t).total_seconds()
    unc = first.uncertainty_s + nxt.uncertainty_s
    if gap > 2 * unc:
        return "high", gap
    if gap > unc:
        return "medium", gap
    # a reaction (teardown, peer-gone error) may follow within the uncertainty: it is still a reaction
    return "medium" if not nxt.intrinsic else "low", gap


def _field_line(ctx: Context, input_id: int, line_no: int, note: str):
    """A torchrun table block is cited at its ``exitcode`` line (4 below the ``[N]:`` header) when it is there."""
    if note.startswith("torchrun"):
        ev = ctx.evidence(input_id, line_no + 4, note=note)
        if "exitcode" in ev.text:
            return ev
    return ctx.evidence(input_id, line_no, note=note)
