"""N021 ras-missing-processes: NCCL RAS could not reach some of the job's processes (INCOMPLETE, DEAD).

What it detects
    The ``INCOMPLETE`` and ``DEAD`` blocks of an ``ncclras`` report (NCCL 2.24+, text or JSON):
    "Missing communicator data from N job processes" with each ``Process P on node N managing
    GPU g``, "N job processes are considered dead (unreachable via the RAS network)", and per
    communicator "Missing communicator data from N ranks" with the ranks. It names the
    processes, their communicator and global ranks (where the pids map) and their nodes (IP
    addresses turned into host names through NCCL's bootstrap addresses): a node whose every
    process is missing died or never joined. It says what the job's own logs show for those
    processes when the inputs hold them (a failure of their own, or nothing).

Why it matters
    A process RAS cannot reach has crashed, hangs with a dead network, or sits on a node that
    went away: the others wait for it in their next collective. It is the place to look
    first, often before any watchdog timeout.

What to do
    Check the named nodes (are they up, did the scheduler or the kernel kill the processes:
    dmesg, the OOM killer, ``sacct``); read the named processes' own last lines; if a whole node
    is missing, exclude it and restart.

Known false positives
    RAS gathers over its own TCP network: a process that is only slow to answer during
    collection shows up as missing (a collection TIMEOUT in the same report hints at it), and
    processes that exited normally at the end of a job are missing too. The finding is then
    a warning, not an error: only a report taken while the job failed or hung is an error.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.rules.network import ras_model
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.network.transport_model import evidence_of

RULE = Rule(code="N021", name="ras-missing-processes", severity=Severity.ERROR, category=Category.CRASH, since="0.1.0")
LATE = True   # reads what the crash rules (X001, X004, X006) found about the same nodes


def check(ctx: Context) -> list[Finding]:
    ras = ras_model.latest(ctx)
    if ras.empty or ras.ranks.is_empty() and ras.findings.is_empty():
        return []
    gone = ras.ranks.filter(pl.col("why").is_in(["missing", "missing_process", "dead_process"])) \
        if not ras.ranks.is_empty() else ras.ranks
    blocks = ras.findings.filter(pl.col("what").is_in(["missing_processes", "dead_processes", "missing_ranks",
                                                       "unlisted_processes"])) if not ras.findings.is_empty() else ras.findings
    if gone.is_empty() and blocks.is_empty():
        return []
    dead = gone.filter(pl.col("why") == "dead_process")
    procs = gone.filter(pl.col("why").is_in(["missing_process", "dead_process"])).unique(["pid", "node"], maintain_order=True)
    ranks_rows = gone.filter(pl.col("why") == "missing")
    # NCCL 2.27.3 printed communicators "missing 255 ranks" with garbage rank numbers (nccl#1762):
    # ranks outside the communicator, or more missing than it has, are the report's bug.
    bogus = _bogus(ras, ranks_rows, blocks)
    if bogus:
        ranks_rows = ranks_rows.filter(pl.col("rank") < pl.col("hash").map_elements(
            lambda h: ras.comm_size(h) or 1 << 30, return_dtype=pl.Int64))
        gone = gone.filter(pl.col("why") != "missing").vstack(ranks_rows.select(gone.columns)) \
            if not ranks_rows.is_empty() else gone.filter(pl.col("why") != "missing")
    nodes = sorted({h for n in gone["node"].drop_nulls().to_list() if (h := ras.host(n))})
    glob = sorted({g for r in gone.iter_rows(named=True)
                   if (g := ras.global_rank(r["rank"], r["pid"], ras.comm_size(r["hash"]))) is not None})
    comm_ranks = sorted(set(ranks_rows["rank"].drop_nulls().to_list()))
    counted = {w: int(blocks.filter(pl.col("what") == w)["count"].fill_null(0).sum()) for w in
               ("missing_processes", "dead_processes", "missing_ranks", "unlisted_processes")}
    total = ras.reports["processes"][0] if "processes" in ras.reports.columns else None
    parts = []
    if counted["missing_processes"]:
        parts.append(f"{counted['missing_processes']} job process(es) did not answer")
    if counted["dead_processes"]:
        parts.append(f"{counted['dead_processes']} considered dead (unreachable via the RAS network)")
    if counted["missing_ranks"]:
        parts.append(f"communicator ranks missing: {rank_ranges(comm_ranks) or counted['missing_ranks']}")
    listed = "; ".join(f"process {r['pid'] if r['pid'] is not None else '(pid unknown)'} on "
                       f"{ras.host(r['node']) or r['node'] or 'an unknown node'}"
                       + (f" ({r['node']})" if r["node"] and ras.host(r["node"]) != r["node"] else "")
                       + (f" GPU {r['gpu']}" if r["gpu"] is not None else "")
                       + (" (dead)" if r["why"] == "dead_process" else "")
                       for r in procs.head(8).iter_rows(named=True))
    whole = _whole_nodes(ras, gone)
    own = _own_failures(ctx, nodes, glob)
    hung = ctx.outcome.get("outcome") in ("hung", "failed") or not ras_model.c10d_timeouts(ctx).is_empty()
    timeouts = ras.reports["timeouts"][0] if "timeouts" in ras.reports.columns else None
    message = (f"RAS (NCCL {ras.reports['nccl_version'][0] or 'version unknown'}) could not reach part of the job: "
               f"{'; '.join(parts) or 'missing data'}"
               + (f" of {total} processes" if total else "")
               + (f": {listed}" if listed else "")
               + (f"; global rank {rank_ranges(glob)}" if glob else "")
               + (f"; every process of {hostlist(whole)} is missing: the node died or never joined" if whole else "")
               + (f"; the logs show their own failure: {own}" if own else
                  "; the inputs hold no failure of their own (their logs, the kernel log of the node would say)")
               + (f"; RAS also had {timeouts} collection timeout(s): slow answers look like missing ones"
                  if timeouts else ""))
    if bogus:
        message += (f"; {bogus}: a malformed report (NCCL 2.27.3 printed such garbage, nccl#1762), so its missing "
                    "ranks are not evidence")
    evidence = evidence_of(ctx, blocks, "RAS: missing or dead", 2) + evidence_of(ctx, procs, "a process RAS names", 2)
    few = bool(total) and 0 < procs.height < max(2, total / 2)
    culprit = hung and few and bool(nodes) and not bogus
    if bogus and procs.is_empty():
        hung = False   # nothing left but the report's own garbage: a warning
    return [RULE.finding(severity=RULE.severity if hung else Severity.WARNING, confidence=0.75 if culprit else 0.55,
                    title=f"RAS: {procs.height or counted['missing_processes'] + counted['dead_processes']} process(es) "
                    f"missing{' on ' + hostlist(nodes) if nodes else ''}", message=message,
                    ranks=glob if culprit else [], nodes=nodes, gpus=[ctx.gpu_of(r) for r in glob[:4]] if culprit else [],
                    evidence=evidence,
                    suggestion=(f"Check {hostlist(nodes) if nodes else 'the named nodes'}: is the node up, did the kernel "
                                "or the scheduler kill the processes (dmesg, OOM killer, sacct); read the processes' own "
                                "last lines; exclude a node that is gone and restart."),
                    culprit=culprit,
                    details={"processes": procs.select("pid", "node", "gpu", "why").to_dicts(),
                             "comm_ranks": comm_ranks, "global_ranks": glob, "nodes": nodes, "whole_nodes": whole,
                             "dead": dead.height, "counts": counted, "drain": False})]


def _bogus(ras, ranks_rows: pl.DataFrame, blocks: pl.DataFrame) -> str:
    """What makes the report's missing ranks impossible, or '' when they are plausible."""
    out = []
    for r in ranks_rows.iter_rows(named=True):
        size = ras.comm_size(r["hash"])
        if size and r["rank"] is not None and r["rank"] >= size:
            out.append(f"rank {r['rank']} of a {size}-rank communicator")
            break
    missing = blocks.filter(pl.col("what") == "missing_ranks") if not blocks.is_empty() else blocks
    for r in missing.iter_rows(named=True):
        size = ras.comm_size(r["hash"])
        if size and (r["count"] or 0) > size:
            out.append(f"{r['count']} ranks missing from a {size}-rank communicator")
            break
    return "; ".join(out)


def _whole_nodes(ras, gone: pl.DataFrame) -> list[str]:
    """Nodes RAS lists whose every process it names is missing (and it names no answering one)."""
    if gone.is_empty():
        return []
    answering = ras.ranks.filter(~pl.col("why").is_in(["missing", "missing_process", "dead_process"]))
    alive = set(answering["node"].drop_nulls().to_list())
    return sorted({ras.host(n) for n in gone["node"].drop_nulls().to_list() if n not in alive})


def _own_failures(ctx: Context, nodes: list[str], ranks: list[int]) -> str:
    """What other findings say about these nodes or ranks (a crash, an OOM kill, a node failure)."""
    hits = [f for f in ctx.findings if f.severity == "error" and f.code != RULE.code
            and (set(f.nodes) & set(nodes) or set(f.ranks) & set(ranks))]
    return "; ".join(f"{f.code} {f.title}" for f in hits[:3])
