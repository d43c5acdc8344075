"""X006 node-failure: Slurm ended the job with NODE_FAIL: one of its nodes stopped responding.

What it detects
    sacct / scontrol state ``NODE_FAIL`` (``Reason=NodeFail`` / ``NodeDown``). The failed node is
    named when the logs show it: the node whose ranks stopped logging first, well before the
    others (a node that lost power or its network goes silent at once).

Why it matters
    A node failure kills every process on the node without a trace in the job's own logs; the
    ranks on the other nodes then time out or lose their connections, which looks like a
    network fault or a hang.

What to do
    ``scontrol show node NODE`` (Reason, State) and the slurmctld log for why the node went
    down; the node's BMC/IPMI event log (``ipmitool sel list``) and kernel log from before the
    failure. Exclude the node from the resubmitted job (``--exclude``) until it is checked.

Known false positives
    Slurm also reports NODE_FAIL when slurmd on a healthy node lost contact with the controller
    for a while (a management-network blip); the node is then only named when its ranks went
    silent first.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer import commands
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="X006", name="node-failure", severity=Severity.ERROR, category=Category.EXTERNAL, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    job = ctx.table("job")
    if job.is_empty() or "state" not in job.columns:
        return []
    rows = job.filter(pl.col("state").fill_null("").str.starts_with("NODE_FAIL")
                      | pl.col("reason").fill_null("").is_in(["NodeFail", "NodeDown"])).sort("input_id", "line_no")
    if rows.is_empty():
        return []
    row = rows.row(0, named=True)
    node, gap = _silent_first(ctx)
    evidence = [ctx.evidence(row["input_id"], row["line_no"], note="the scheduler's record: NODE_FAIL")]
    if node is not None:
        message = (f"Slurm ended the job with NODE_FAIL; {node}'s ranks stopped logging {gap:.0f} s before any other "
                   "node's: it is the node that failed")
        return [RULE.finding(confidence=0.75, title=f"node failure: {node}", message=message, nodes=[node],
                        evidence=evidence, culprit=True,
                        suggestion=f"{commands.sh('scontrol', 'show', 'node', commands.shown(node, commands.host))}; "
                                   "check its BMC event log and kernel log; resubmit with "
                                   f"{commands.sh('--exclude=' + commands.shown(node, commands.host))} until it is checked.",
                        details={"node": node, "silent_first_s": gap, "drain": True})]
    return [RULE.finding(confidence=0.6, title="node failure (the node is not named in these logs)",
                    message="Slurm ended the job with NODE_FAIL; the logs do not show which node failed",
                    evidence=evidence, culprit=False,
                    suggestion="sacct -j JOBID -o NodeList,State and scontrol show node / the slurmctld log name the "
                               "node that went down; exclude it from the resubmitted job.",
                    details={"drain": None})]


def _silent_first(ctx: Context) -> tuple[str | None, float]:
    """The node whose last log line came first, by more than 60 s before every other node."""
    parts = []
    for name in ("events", "collectives", "iterations"):
        t = ctx.table(name)
        if not t.is_empty() and {"node", "ts"} <= set(t.columns):
            parts.append(t.select("node", pl.col("ts").cast(pl.Datetime("us"))).drop_nulls())
    if not parts:
        return None, 0.0
    last = pl.concat(parts).group_by("node").agg(t=pl.col("ts").max())
    if last.height < 2:
        return None, 0.0
    last = last.sort("t")
    gap = (last["t"][1] - last["t"][0]).total_seconds()
    return (last["node"][0], gap) if gap > 60 else (None, 0.0)
