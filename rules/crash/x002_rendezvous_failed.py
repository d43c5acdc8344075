"""X002 rendezvous-failed: the launcher never formed the job.

What it detects
    torchrun's elastic agent (or ``init_process_group``'s store) failed to gather the
    processes it was told to expect: ``RendezvousTimeoutError``, ``RendezvousClosedError``,
    ``DistStoreError ... clients joined``, ``DistNetworkError`` and the other rendezvous
    errors of ``docs/formats/pytorch-failures.md``. No training step ran, so there is nothing to
    hang or crash later: the job ended at its start.

Why it matters
    Without it such a job reads like a job with nothing to report. The usual causes are a
    node that never started its agent (scheduler, container or image problem), a wrong
    ``--nnodes``/world size, an unreachable ``MASTER_ADDR``/rendezvous endpoint, or a
    firewall.

What to do
    Compare the expected node and process counts with the nodes that logged anything
    (``job_nodes.has_logs`` when the scheduler's record is in the inputs); check the
    rendezvous endpoint is reachable from every node.

    When H007 names a node that never joined, this finding is its symptom (category
    ``symptom``): the agents that did start waited for that node.

Known false positives
    An elastic job that retried and then formed (a later attempt trained): the rule only
    fires when no training progress or worker exit follows the error.
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.hang import h007_init_hang
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity

RULE = Rule(code="X002", name="rendezvous-failed", severity=Severity.ERROR, category=Category.CRASH, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    events = ctx.table("events")
    if events.is_empty() or "kind" not in events.columns:
        return []
    errors = events.filter(pl.col("kind") == "rendezvous_error").sort("input_id", "line_no")
    if errors.is_empty():
        return []
    if _job_ran(ctx):
        return []
    first = errors.row(0, named=True)
    what = first.get("detail") or "a rendezvous error"
    missing = _nodes_without_logs(ctx)
    message = f"the launcher failed to form the job ({what}); no training step or worker exit is in the logs"
    category = Category.CRASH
    if missing:
        message += f"; the scheduler expected node(s) {', '.join(missing)}, which left no log at all"
    named = [f for f in h007_init_hang.check(ctx) if f.culprit]
    if named:
        # H007 names the node that never joined: the rendezvous error is what the others saw.
        category = Category.SYMPTOM
        message += (f"; the agents that did start waited for {', '.join(named[0].nodes)} and timed out: a symptom "
                    "of that node never joining (H007)")
    return [RULE.finding(confidence=0.85, title=f"rendezvous failed: {what}", message=message, nodes=missing,
                    evidence=[ctx.evidence(first["input_id"], first["line_no"], note="first rendezvous error")],
                    suggestion="Check that every expected node started its agent, that --nnodes / the world size is "
                               "right, and that the rendezvous endpoint (MASTER_ADDR:port) is reachable from all "
                               "nodes.",
                    category=category, culprit=False,
                    details={"error": what, "nodes_without_logs": missing})]


def _job_ran(ctx: Context) -> bool:
    for name in ("iterations", "exits"):
        table = ctx.table(name)
        if not table.is_empty():
            return True
    return False


def _nodes_without_logs(ctx: Context) -> list[str]:
    nodes = ctx.table("job_nodes")
    if nodes.is_empty() or "has_logs" not in nodes.columns:
        return []
    return sorted(set(nodes.filter(~pl.col("has_logs").fill_null(True))["node"].drop_nulls().to_list()))
