"""N022 ras-errors: what an NCCL RAS report says beyond counts -- ranks with errors, odd statuses, collection timeouts, and a healthy report that the watchdog contradicts.

What it detects
    In the latest ``ncclras`` report (NCCL 2.24+, text or JSON): ``ERROR`` blocks
    ("Initialization error on N ranks", "Asynchronous error on N ranks", "Rank R reported
    Remote process error"), status mismatches (``Rank 7 has status ABORT``, ranks still in
    ``INIT``), and the collection's ``TIMEOUT`` warning. It names the ranks (global where the pids
    map), their nodes and the NCCL error each reported. And it cross-checks the report with
    the c10d evidence: a report whose every communicator says ``RUNNING OK`` while a watchdog in
    the same inputs timed out is reported as information -- RAS did not see that hang
    (nccl#1730), so "RAS OK" is no proof of health.

Why it matters
    An asynchronous error is NCCL's own record of a failed operation (a network error, a CUDA
    error) on that rank: the rank where the trouble started. A rank in ABORT was aborted
    (by the watchdog or the application); a rank still in INIT never finished joining.

What to do
    Read the named ranks' own logs around the report's time (NCCL_DEBUG=WARN shows the WARN
    behind an asynchronous error); for Remote process errors look at the peer it talks to.
    With a healthy RAS report and a watchdog timeout, look at the watchdog's collective
    (H001-H005) rather than the network.

Known false positives
    A report taken while ranks were shutting down shows FINALIZE/ABORT statuses that are part
    of a normal teardown; collection timeouts alone mean RAS's own connections were slow.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.rules.network import ras_model
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.network.transport_model import evidence_of

RULE = Rule(code="N022", name="ras-errors", severity=Severity.ERROR, category=Category.NETWORK, since="0.1.0")
LATE = True   # after the hang rules, whose watchdog evidence it cross-checks


def check(ctx: Context) -> list[Finding]:
    ras = ras_model.latest(ctx)
    if ras.empty:
        return []
    out = []
    ranks = ras.ranks
    errors = ranks.filter(pl.col("why").is_in(["init_error", "async_error"])) if not ranks.is_empty() else ranks
    if not errors.is_empty():
        out.append(_errors(ctx, ras, errors))
    odd = ranks.filter((pl.col("why") == "status") & pl.col("status").is_in(["ABORT", "INIT", "NOCOMM"])) \
        if not ranks.is_empty() else ranks
    if not odd.is_empty():
        out.append(_statuses(ctx, ras, odd))
    timeouts = ras.reports["timeouts"][0] if "timeouts" in ras.reports.columns else None
    if timeouts:
        rows = ras.findings.filter(pl.col("what") == "timeouts") if not ras.findings.is_empty() else ras.findings
        out.append(RULE.finding(severity=Severity.WARNING, confidence=0.4, title=f"RAS: {timeouts} communication timeout(s) while gathering data",
                           message=f"the RAS client had {timeouts} timeout(s) collecting the report: some processes answered "
                           "late or not at all (a stuck host, a dead network path); the report may be incomplete",
                           evidence=evidence_of(ctx, rows, "RAS collection timeouts", 1),
                           suggestion="Repeat the query (ncclras) and compare; check the hosts that answered late.",
                           culprit=False, details={"check": "timeouts", "timeouts": timeouts}))
    out += _healthy_but_timed_out(ctx, ras)
    return out


def _where(ras, rows: pl.DataFrame) -> tuple[list[int], list[int], list[str]]:
    comm = sorted(set(rows["rank"].drop_nulls().to_list()))
    glob = sorted({g for r in rows.iter_rows(named=True)
                   if (g := ras.global_rank(r["rank"], r["pid"], ras.comm_size(r["hash"]))) is not None})
    nodes = sorted({h for n in rows["node"].drop_nulls().to_list() if (h := ras.host(n))})
    return comm, glob, nodes


def _errors(ctx, ras, rows: pl.DataFrame) -> Finding:
    comm, glob, nodes = _where(ras, rows)
    parts = [f"rank {r['rank']} {'async' if r['why'] == 'async_error' else 'init'} error '{r['status'] or '?'}'"
             + (f" on {ras.host(r['node'])}" if r["node"] else "") for r in rows.head(8).iter_rows(named=True)]
    kinds = sorted(set(rows["status"].drop_nulls().to_list()))
    remote_only = kinds == ["Remote process error"]
    message = (f"RAS: {rows.height} rank(s) of the job report NCCL errors: {'; '.join(parts)}"
               + (f"; global rank {rank_ranges(glob)}" if glob else "")
               + ("; a Remote process error is a reaction: the peer it talks to failed first" if remote_only else ""))
    culprit = bool(glob) and not remote_only and len(comm) <= 2
    return RULE.finding(confidence=0.7 if culprit else 0.5,
                   title=f"RAS: NCCL error on rank(s) {rank_ranges(comm)}" + (f" on {hostlist(nodes)}" if nodes else ""),
                   message=message, ranks=glob if culprit else [], nodes=nodes if culprit else [],
                   gpus=[ctx.gpu_of(r) for r in glob[:4]] if culprit else [],
                   evidence=evidence_of(ctx, rows, "RAS: a rank's NCCL error", 3),
                   suggestion=("Read these ranks' own logs near the report's time (NCCL_DEBUG=WARN shows the WARN "
                               "behind the error); for a Remote process error, the peer's."),
                   category=Category.NETWORK if "Remote process error" in kinds else Category.CRASH, culprit=culprit,
                   details={"check": "errors", "comm_ranks": comm, "global_ranks": glob, "errors": kinds, "drain": False})


def _statuses(ctx, ras, rows: pl.DataFrame) -> Finding:
    comm, glob, nodes = _where(ras, rows)
    parts = [f"rank {r['rank']} {r['status']}" + (f" on {ras.host(r['node'])}" if r["node"] else "")
             for r in rows.head(8).iter_rows(named=True)]
    meaning = {"ABORT": "aborted (by the watchdog or the application)", "INIT": "never finished joining",
               "NOCOMM": "no longer a member (destroyed its communicator)"}
    why = "; ".join(f"{s}: {meaning[s]}" for s in sorted(set(rows["status"].to_list())))
    return RULE.finding(severity=Severity.WARNING, confidence=0.5, title=f"RAS: rank(s) {rank_ranges(comm)} in another state than the rest",
                   message=f"RAS: communicator ranks have different status: {'; '.join(parts)} ({why})"
                   + (f"; global rank {rank_ranges(glob)}" if glob else ""),
                   ranks=[], nodes=nodes, evidence=evidence_of(ctx, rows, "RAS: a rank's status", 3),
                   suggestion="Read those ranks' logs: an ABORT follows an error or a timeout on that rank.",
                   category=Category.HANG, culprit=False,
                   details={"check": "status", "comm_ranks": comm, "global_ranks": glob,
                            "statuses": sorted(set(rows["status"].to_list()))})


def _healthy_but_timed_out(ctx, ras) -> list[Finding]:
    comms = ras.comms
    if comms.is_empty() or not (comms["errors"].fill_null("OK") == "OK").all():
        return []
    timeouts = ras_model.c10d_timeouts(ctx)
    if timeouts.is_empty():
        return []
    first = timeouts.sort("input_id", "line_no").row(0, named=True)
    what = f"{first.get('op') or 'a collective'}" + (f" SeqNum {first['seq']}" if first.get("seq") is not None else "")
    return [RULE.finding(severity=Severity.INFO, confidence=0.6, title="RAS reported every communicator RUNNING OK; the watchdog still timed out",
                    message=f"the RAS report says {comms.height} communicator group(s) RUNNING OK, yet rank "
                    f"{first.get('rank') if first.get('rank') is not None else '?'} timed out in {what}: RAS does "
                    "not see this kind of hang (nccl#1730), so the report is no proof of health; the watchdog's "
                    "collective is where to look",
                    evidence=evidence_of(ctx, ras.comms, "RAS: OK", 1)
                    + [ctx.evidence(first["input_id"], first["line_no"], note="the watchdog timeout")],
                    suggestion="Follow the watchdog's collective (the hang findings); take py-spy dumps of the ranks.",
                    category=Category.INFO, culprit=False, details={"check": "ok_but_timeout"})]
