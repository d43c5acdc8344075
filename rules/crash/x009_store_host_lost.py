"""X009 store-host-lost: ranks lost the TCPStore: the process that hosted it went away first.

What it detects
    c10d store errors on the surviving ranks (``Failed to check the "should dump" flag on
    TCPStore, (maybe TCPStore server has shut down too early)``, ``sendBytes failed ... Broken
    pipe``, ``recvValue failed``, ``Connection reset by peer`` on the store socket) when no rank's
    own failure explains them. The TCPStore lives in one process (rank 0, or the torchrun agent
    of the rendezvous host): when that process exits or its host is stopped, every other rank's
    heartbeat monitor and watchdog report the lost store.

Why it matters
    The errors appear on the ranks that are still alive, so the first error seen is on a rank
    that did nothing wrong. The origin is the store host, whose own log usually says nothing (it
    was stopped, or it exited cleanly before the others).

What to do
    Find why the store host's process ended: its own log, its exit code in the launcher's
    table, the scheduler's record of that node. If rank 0 finished or crashed early, look at
    rank 0 first. Keep the store host alive until every rank has shut down
    (``destroy_process_group`` on every rank before rank 0 exits).

Known false positives
    A network partition between the store host and the others produces the same lines while
    the store host is fine; the finding then names no culprit (it never does: the store host
    is usually not in the logs that show the errors).
"""

from __future__ import annotations

import polars as pl

from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.crash.crash_model import first_failure

RULE = Rule(code="X009", name="store-host-lost", severity=Severity.ERROR, category=Category.SYMPTOM, since="0.1.0")

_STORE_LOST = "should dump|TCPStore server|Broken pipe|recvValue failed|sendBytes failed|Connection reset by peer"


def check(ctx: Context) -> list[Finding]:
    events = ctx.table("events")
    if events.is_empty() or not {"kind", "message"} <= set(events.columns):
        return []
    rows = events.filter((pl.col("kind") == "store_error") & pl.col("message").fill_null("").str.contains(_STORE_LOST))
    if rows.is_empty():
        return []
    rows = rows.sort("input_id", "line_no")
    ranks = sorted(set(rows["rank"].drop_nulls().to_list()))
    first, _, _ = first_failure(ctx)
    host = _store_host(ctx)
    origin = (f"the store host ({host})" if host else "the process that hosted the TCPStore (rank 0 or the "
              "rendezvous host's agent)")
    message = (f"{len(ranks) or 'some'} rank(s) ({', '.join(map(str, ranks)) or '?'}) lost their connection to the "
               f"TCPStore (broken pipe / store shut down): these ranks are symptoms; the origin is {origin}, which "
               "exited or was stopped before them")
    if first is not None:
        message += f"; rank {first.rank} is the first rank whose own failure is in these logs (see X001)"
    evidence = [ctx.evidence(i, n, note="a surviving rank's store error") for i, n in
                rows.select("input_id", "line_no").head(2).iter_rows()]
    return [RULE.finding(confidence=0.6, title="TCPStore host went away; the store errors are symptoms", message=message,
                    ranks=ranks, evidence=evidence, culprit=False,
                    suggestion="Look at the store host's log and exit (rank 0 / MASTER_ADDR / the rdzv_endpoint host): "
                               "why did it end first? Make every rank call destroy_process_group before rank 0 exits.",
                    details={"store_host": host, "ranks": ranks, "origin": "store host"})]


def _store_host(ctx: Context) -> str | None:
    agent = ctx.table("agent")
    if not agent.is_empty() and "key" in agent.columns:
        vals = agent.filter(pl.col("key") == "rdzv_endpoint")["value"].drop_nulls().to_list()
        if vals:
            return vals[0].rsplit(":", 1)[0]
    env = ctx.table("env")
    if not env.is_empty() and "key" in env.columns:
        vals = env.filter(pl.col("key") == "MASTER_ADDR")["value"].drop_nulls().to_list()
        if vals:
            return vals[0]
    return None
