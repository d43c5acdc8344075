"""X004 oom-killed: the kernel OOM killer (host memory or a cgroup limit) or Kubernetes killed a rank's process.

What it detects
    The kernel's ``Out of memory: Killed process PID (python)`` (host memory exhausted) and
    ``Memory cgroup out of memory: Killed process PID`` (the job's cgroup limit) lines of a node's
    kernel log, with the killed pid joined to the rank through ``ranks.pid``; Slurm's
    ``Detected N oom_kill event`` and state ``OUT_OF_MEMORY``; a Kubernetes container
    ``OOMKilled`` (exit code 137 = 128 + SIGKILL). Only the first kill counts: the SIGKILLs and
    SIGTERMs that follow are the launcher tearing the job down.

Why it matters
    A SIGKILL leaves no traceback: the rank just disappears, its node mates are stopped and the
    other nodes' ranks time out waiting for it, which reads like a hang or a network fault.
    The kernel log is the only place that says why. The node is not broken: its host memory
    (or the job's limit) was too small for what ran on it.

What to do
    Host OOM: reduce host memory per node (DataLoader ``num_workers`` and ``prefetch_factor``,
    pinned-memory buffers, CPU offload of optimizer state, checkpoint staging in RAM) or check
    what else ran on the node. cgroup OOM: raise the job's memory request (``--mem``, the pod's
    ``resources.limits.memory``) or lower the usage as above. No drain: the hardware is fine.

Known false positives
    A kill after the job had already failed or hung (during teardown) is reported as a symptom
    at lower severity, not as the cause. A killed pid that matches no rank (a data-loader
    worker, another user's process) is reported for the node, with the rank unknown.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.crash.crash_model import first_failure, first_timeout, oom_kills

RULE = Rule(code="X004", name="oom-killed", severity=Severity.ERROR, category=Category.EXTERNAL, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    kills = oom_kills(ctx)
    if kills:
        return _kernel(ctx, kills)
    return _scheduler(ctx)


def _kernel(ctx: Context, kills: list[dict]) -> list[Finding]:
    kill = kills[0]                                   # only the first kill counts
    rank, node = kill.get("rank"), kill.get("node")
    first, tied, _ = first_failure(ctx)
    t_out = first_timeout(ctx)
    late = False
    if kill.get("t") is not None:
        if t_out is not None and kill["t"] > t_out:
            late = True                               # after the first watchdog timeout: teardown
        if first is not None and first.t is not None and first.rank != rank and \
                (kill["t"] - first.t).total_seconds() > first.uncertainty_s + kill["uncertainty_s"]:
            late = True                               # another rank had already failed
    what = "a cgroup memory limit (the job's memory request)" if kill["cgroup"] else "host memory"
    who = f"rank {rank}'s process" if rank is not None else f"process {kill['pid']} ({kill.get('process') or '?'})"
    when = f" at {kill['t']:%Y-%m-%d %H:%M:%S}" if kill.get("t") else ""
    message = (f"the kernel OOM killer killed {who} (pid {kill['pid']}) on {node}{when}: {what} ran out; "
               "SIGKILL leaves no traceback")
    if len(kills) > 1:
        message += f"; {len(kills) - 1} later kill(s) follow it (only the first counts)"
    evidence = [ctx.evidence(kill["input_id"], kill["line_no"], note="the OOM killer's kill")]
    gpu = ctx.gpu_of(rank) if rank is not None else {"node": node}
    details = {"pid": kill["pid"], "cgroup": kill["cgroup"], "rank": rank, "time": str(kill.get("t")),
               "order_confidence": kill.get("order_confidence"), "drain": False,
               "later_kills": [{"node": k["node"], "pid": k["pid"], "rank": k.get("rank")} for k in kills[1:]]}
    suggestion = ("Raise the job's memory limit (sbatch --mem / the pod's resources.limits.memory) or lower host "
                  "memory use (DataLoader num_workers, pinned buffers, CPU offload)." if kill["cgroup"] else
                  "Lower host memory use per node (DataLoader num_workers and prefetch_factor, pinned-memory buffers, "
                  "CPU offload, in-RAM checkpoint staging) or check what else ran on the node; no drain needed.")
    if late:
        return [RULE.finding(severity=Severity.WARNING, confidence=0.5, title=f"OOM kill on {node} after the job had already failed",
                        message=message + "; it came after the first failure or timeout, so it is not the cause",
                        ranks=[rank] if rank is not None else [], nodes=[node] if node else [], evidence=evidence,
                        suggestion=suggestion, category=Category.SYMPTOM, culprit=False, details=details)]
    confidence = 0.9 if rank is not None else 0.6
    title = f"{'cgroup' if kill['cgroup'] else 'host'} OOM killer killed " + \
        (f"rank {rank} on {node}" if rank is not None else f"pid {kill['pid']} on {node}")
    return [RULE.finding(confidence=confidence, title=title, message=message, ranks=[rank] if rank is not None else [],
                    nodes=[node] if node else [], gpus=[gpu] if rank is not None else [], evidence=evidence,
                    suggestion=suggestion, culprit=True, details=details)]


def _scheduler(ctx: Context) -> list[Finding]:
    """No kernel log: Slurm's oom_kill line / OUT_OF_MEMORY state, or a Kubernetes OOMKilled container."""
    job, slurm = ctx.table("job"), ctx.table("slurm")
    hits = []
    if not slurm.is_empty() and "kind" in slurm.columns:
        for row in slurm.filter(pl.col("kind") == "oom_kill").iter_rows(named=True):
            hits.append((row, "Slurm detected an oom_kill event in the step (the job's cgroup memory limit)",
                         _short(row.get("host"))))
    if not job.is_empty() and "state" in job.columns:
        # sacct rows have no source, kubectl rows no reason: each is read as empty when absent
        job = with_columns(job, reason=pl.String, source=pl.String, exit_code=pl.Int64)
        state = pl.col("state").fill_null("")
        reason = pl.col("reason").fill_null("")
        k8s = pl.col("source").fill_null("").str.contains("k8s|kube|pod")
        rows = job.filter(state.str.contains("OUT_OF_MEMORY") | reason.str.contains("OOMKilled")
                          | (k8s & (pl.col("exit_code") == 137)))
        for row in rows.iter_rows(named=True):
            if "OOMKilled" in (row.get("reason") or "") or row.get("exit_code") == 137:
                text = "Kubernetes killed the container for exceeding its memory limit (OOMKilled, exit code 137 = " \
                       "128 + SIGKILL)"
            else:
                text = f"Slurm recorded the job as {row['state']} (the cgroup memory limit was hit)"
            hits.append((row, text, _short(row.get("nodelist")) if row.get("nnodes") in (None, 1) else None))
    if not hits:
        return []
    row, text, node = hits[0]
    first, _, _ = first_failure(ctx)
    ranks = [first.rank] if first is not None and first.how == "killed" else []
    if first is not None and first.how == "killed" and first.node:
        node = first.node
    message = text + (f"; rank {ranks[0]} is the process that was killed (SIGKILL)" if ranks else
                      "; which process was killed is not in these logs (no kernel log)")
    return [RULE.finding(confidence=0.8 if ranks else 0.6,
                    title="memory limit kill" + (f" of rank {ranks[0]}" if ranks else "") + (f" on {node}" if node else ""),
                    message=message, ranks=ranks, nodes=[node] if node else [],
                    gpus=[ctx.gpu_of(r) for r in ranks], evidence=[ctx.evidence(row["input_id"], row["line_no"],
                                                                                 note="the scheduler's record")],
                    suggestion="Raise the memory limit (sbatch --mem, resources.limits.memory) or lower host memory "
                               "use; collect the node's kernel log (journalctl -k) to see which process was killed.",
                    culprit=bool(ranks or node),
                    details={"source": row.get("source") or row.get("kind"), "drain": False})]


def _short(host: str | None) -> str | None:
    return host.split(".")[0].split("/")[0] if host else host
