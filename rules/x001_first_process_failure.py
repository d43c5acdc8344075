"""X001 first-process-failure: the worker whose failure started the job's end.

What it detects
    torchrun's failure summary names the first process it saw fail ("Root Cause (first
    observed failure)") with its exit code or signal. When no hang was found, that process
    is where the failure started: its exception (the traceback it printed), or the signal
    that killed it (SIGKILL from outside: the host OOM killer, the scheduler, an operator;
    SIGABRT/SIGSEGV from the process itself).

Why it matters
    Without this, a job that crashed reads like a job with nothing to report. The other
    workers' exit codes are the agent tearing them down (SIGTERM): they are symptoms.

What to do
    Read the named rank's traceback. For SIGKILL, look at the node's kernel log (OOM killer,
    cgroup limit) and the scheduler's record of the job.

Known false positives
    In a hang, the first process to exit is a rank whose watchdog fired, not the cause: this
    rule stays quiet whenever the hang analysis found ranks waiting in a collective (H001-H005
    report those). A process killed by the agent before it could print its own error is
    indistinguishable from one killed from outside; the message says which the evidence shows.
"""

from __future__ import annotations

import polars as pl

from rules.base import Context, Finding
from rules.hang_model import analyse_hang

CODE = "X001"
NAME = "first-process-failure"
SEVERITY = "error"

SIGNALS = {-9: "SIGKILL", -6: "SIGABRT", -11: "SIGSEGV", -15: "SIGTERM", -7: "SIGBUS", -4: "SIGILL", -8: "SIGFPE"}


def check(ctx: Context) -> list[Finding]:
    exits = ctx.table("exits")
    if exits.is_empty() or "root_cause" not in exits.columns:
        return []
    root = exits.filter(pl.col("root_cause").fill_null(False) & pl.col("rank").is_not_null()
                        & (pl.col("exitcode").fill_null(1) != 0))
    if root.is_empty():
        return []
    hang = analyse_hang(ctx)
    if hang.hang_states or hang.culprits:
        return []  # a hang: the first exit is a waiting rank's timeout (H004 says so)
    row = root.sort("line_no").row(0, named=True)
    rank, code = row["rank"], row["exitcode"]
    signal = row.get("signal") or SIGNALS.get(code)
    raised = _exception_of(ctx, rank)
    if raised is not None:
        how = f"raised {raised['message']}"
        confidence = 0.9
    elif signal == "SIGKILL":
        how = "was killed by SIGKILL (from outside the process: the host OOM killer, the scheduler or an operator)"
        confidence = 0.7
    else:
        how = f"exited with code {code}" + (f" ({signal})" if signal else "") + " without a traceback in the logs"
        confidence = 0.6
    gpu = ctx.gpu_of(rank)
    evidence = [ctx.evidence(row["input_id"], row["line_no"], note="torchrun: first observed failure")]
    if raised is not None:
        evidence.append(ctx.evidence(raised["input_id"], raised["line_no"], note="its exception"))
    others = exits.filter(~pl.col("root_cause").fill_null(False) & pl.col("rank").is_not_null())
    torn_down = others.filter(pl.col("exitcode") == -15)["rank"].to_list()
    message = (f"rank {rank} {how}; torchrun saw it fail first (exit code {code})"
               + (f"; {len(torn_down)} other worker(s) were then stopped with SIGTERM by the agent" if torn_down else ""))
    suggestion = ("Read rank {r}'s traceback above." if raised is not None else
                  "Check the node's kernel log (OOM killer, cgroup limit) and the scheduler's job record for who "
                  "sent the signal.").format(r=rank)
    return [Finding(CODE, NAME, SEVERITY, confidence, f"rank {rank} failed first", message, ranks=[rank],
                    nodes=[gpu["node"]] if gpu.get("node") else [], gpus=[gpu], evidence=evidence,
                    suggestion=suggestion, category="crash", culprit=True,
                    details={"exitcode": code, "signal": signal, "exception": raised["message"] if raised else None,
                             "torn_down_ranks": torn_down})]


def _exception_of(ctx: Context, rank: int) -> dict | None:
    events = ctx.table("events")
    if events.is_empty() or "rank" not in events.columns:
        return None
    rows = events.filter((pl.col("kind") == "exception") & (pl.col("rank") == rank)).sort("input_id", "line_no")
    return rows.row(0, named=True) if not rows.is_empty() else None
