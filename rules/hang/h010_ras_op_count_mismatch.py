"""H010 ras-op-count-mismatch: NCCL RAS says the ranks of a communicator launched different numbers of one collective.

What it detects
    A ``MISMATCH`` block of an ``ncclras`` report (NCCL 2.24+, text or JSON): "Communicator
    ranks have different AllGather operation counts", the count lines (``30 ranks have launched
    up to operation 640``, ``2 ranks have launched up to operation 641``) and the ranks RAS
    lists. Per communicator and collective it finds the majority and the ranks whose count
    differs from it, and says which side is behind: ranks behind the majority are the suspects
    (the majority waits in the next operation for them); when the listed minority is *ahead*
    (RAS lists the minority, usually the ones ahead: nccl.md 3.13), the majority is behind and
    no single rank is to blame. The ranks are cross-checked with the c10d evidence (the ranks
    H001/H009 name, the watchdog timeouts) when the inputs hold both.

Why it matters
    RAS sees what every NCCL process has launched, even when PyTorch's watchdog has not fired
    yet: the rank that did not launch the collective the others wait in is the one to look at
    (its stack, its last lines). Reading the listed minority as the culprit blames the ranks
    that are ahead.

What to do
    Dump the stacks of the ranks behind (py-spy dump --pid, the pids RAS prints) while the job
    hangs, and read their last log lines; compare their code path with the others' (a
    conditional collective, an exception that skipped one).

Known false positives
    RAS is a snapshot of a running job: ranks a few operations apart in a healthy, busy job
    show a MISMATCH that clears a moment later (the finding is a warning unless the job hung
    or timed out). A communicator mapped to global ranks only when the pids or its size allow:
    otherwise its ranks are communicator ranks and the finding names no global rank.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.parsers.base import groups_of
from postmortem.rules.network import ras_model
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.network.transport_model import evidence_of

RULE = Rule(code="H010", name="ras-op-count-mismatch", severity=Severity.WARNING, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    ras = ras_model.latest(ctx)
    if ras.empty or ras.findings.is_empty():
        return []
    counts = ras.findings.filter(pl.col("what").is_in(["launched_up_to", "not_launched"]) & pl.col("op").is_not_null())
    if counts.is_empty():
        return []
    out = []
    timeouts = ras_model.c10d_timeouts(ctx)
    named = {r for f in ctx.findings if f.code in ("H001", "H009") and f.culprit for r in f.ranks}
    for (hash_, op), rows in groups_of(counts, "hash", "op", maintain_order=True):
        groups = rows.select(count=pl.col("count").fill_null(1),
                             op_count=pl.when(pl.col("what") == "not_launched").then(0).otherwise(pl.col("op_count")))
        groups = groups.group_by("op_count").agg(pl.col("count").sum()).sort("op_count")
        if groups.height < 2:
            continue
        majority = groups.sort("count", "op_count", descending=[True, True]).row(0, named=True)
        top = int(groups["op_count"].max())
        listed = ras.ranks.filter((pl.col("hash") == hash_) & (pl.col("op") == op)
                                  & pl.col("why").is_in(["launched_up_to", "not_launched"]))
        behind_listed = listed.filter(pl.col("op_count").fill_null(0) < majority["op_count"])
        ahead_listed = listed.filter(pl.col("op_count").fill_null(0) > majority["op_count"])
        size = ras.comm_size(hash_)
        out.append(_finding(ctx, ras, hash_, op, groups, majority, top, behind_listed, ahead_listed, listed, size,
                            timeouts, named, rows))
    return out


def _names(ras, rows: pl.DataFrame, size: int | None) -> tuple[list[int], list[int], list[str]]:
    """(communicator ranks, global ranks where known, nodes) of listed RAS rank rows."""
    comm = sorted(set(rows["rank"].drop_nulls().to_list()))
    glob = sorted({g for r in rows.iter_rows(named=True)
                   if (g := ras.global_rank(r["rank"], r["pid"], size)) is not None})
    nodes = sorted({h for n in rows["node"].drop_nulls().to_list() if (h := ras.host(n))})
    return comm, glob, nodes


def _finding(ctx, ras, hash_, op, groups, majority, top, behind, ahead, listed, size, timeouts, named, rows) -> Finding:
    spread = "; ".join(f"{c} rank(s) at {o if o else 'none launched'}" for o, c in groups.select("op_count", "count").rows())
    hung = not timeouts.is_empty() or ctx.outcome.get("outcome") in ("hung", "failed")
    evidence = evidence_of(ctx, rows, "RAS operation counts", 2) + evidence_of(ctx, listed, "a rank RAS lists", 2)
    comm = f"communicator {hash_}" + (f" ({size} ranks)" if size else "")
    if not behind.is_empty():
        comm_ranks, glob, nodes = _names(ras, behind, size)
        waits = f"{op} operation {majority['op_count']}"
        agree = sorted(set(glob) & named)
        c10d = ""
        if named:
            c10d = (f"; the c10d evidence names rank {rank_ranges(sorted(named))} too" if agree
                    else f"; the c10d evidence names rank {rank_ranges(sorted(named))} instead")
        message = (f"RAS: in {comm} {majority['count']} ranks have launched {op} up to operation "
                   f"{majority['op_count']} and wait in it ({waits}), while communicator rank(s) "
                   f"{rank_ranges(comm_ranks)}{' (global ' + rank_ranges(glob) + ')' if glob else ''}"
                   f"{' on ' + hostlist(nodes) if nodes else ''} are behind ({spread}): the ranks behind are the "
                   f"suspects{c10d}")
        culprit = bool(glob) and (not named or bool(agree))
        confidence = 0.8 if agree else 0.65 if culprit else 0.5
        pids = sorted(set(behind["pid"].drop_nulls().to_list()))
        return RULE.finding(severity=Severity.ERROR if hung else RULE.severity, confidence=confidence,
                       title=f"RAS: rank(s) {rank_ranges(comm_ranks)} behind in {op}", message=message,
                       ranks=glob if culprit else [], nodes=nodes if culprit else [],
                       gpus=[ctx.gpu_of(r) for r in glob[:4]] if culprit else [], evidence=evidence,
                       suggestion=(f"Dump the stacks of the ranks behind while the job hangs (py-spy dump --pid "
                                   f"{', '.join(map(str, pids[:4])) or 'PID'}) and read their last lines: why did "
                                   f"they not launch the next {op}?"),
                       culprit=culprit,
                       details={"hash": hash_, "op": op, "majority": majority, "counts": groups.to_dicts(),
                                "behind_comm_ranks": comm_ranks, "behind_global_ranks": glob, "side": "behind",
                                "c10d_ranks": sorted(named), "agrees_with_c10d": bool(agree)})
    comm_ranks, glob, nodes = _names(ras, ahead, size)
    behind_count = int(groups.filter(pl.col("op_count") < top)["count"].sum())
    message = (f"RAS: in {comm} communicator rank(s) {rank_ranges(comm_ranks) or '(not listed)'}"
               f"{' on ' + hostlist(nodes) if nodes else ''} have launched {op} up to operation {top} and wait in "
               f"it, while {behind_count} ranks have not launched it yet ({spread}): RAS lists the minority, which "
               "is ahead here; the majority is behind, so no single rank is to blame from this report"
               + (f"; the c10d evidence names rank {rank_ranges(sorted(named))}" if named else ""))
    return RULE.finding(severity=Severity.ERROR if hung else RULE.severity, confidence=0.5, title=f"RAS: {op} operation counts differ "
                   f"({behind_count} ranks behind the {int(groups['count'].sum()) - behind_count} listed)", message=message,
                   ranks=[], nodes=[], evidence=evidence,
                   suggestion=(f"Look at what the ranks behind were doing instead of launching {op} {top} "
                               "(their stacks, their last lines); the listed ranks are waiting, not stuck."),
                   culprit=False,
                   details={"hash": hash_, "op": op, "majority": majority, "counts": groups.to_dicts(),
                            "ahead_comm_ranks": comm_ranks, "side": "ahead", "c10d_ranks": sorted(named)})
