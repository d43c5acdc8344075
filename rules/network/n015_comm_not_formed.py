"""N015 comm-not-formed: NCCL communicators that did not form as the job meant them to.

What it detects
    From NCCL's init lines (``comm ... rank R nranks N ... commId 0x... - Init START/COMPLETE``,
    docs/formats/nccl.md 3.5): (1) the processes of one job formed several separate communicators
    of the same size with different commIds, each process in exactly one of them and no
    communicator spanning them -- a 16-rank nccl-tests or training run that became two 8-rank
    jobs (each node its own rendezvous: a per-node MASTER_ADDR/MASTER_PORT or NCCL_COMM_ID, an
    MPI launch of a binary built without MPI); (2) two processes holding the same rank of one
    communicator (a duplicated launch); (3) ranks that started ``Init`` but never printed
    ``Init COMPLETE`` while the others of their communicator did (stuck in connection setup).

Why it matters
    Two half-size jobs train two models on half the data each, or hang at the first
    collective that expects the whole job; nothing fails at init. A duplicated rank corrupts
    the communicator. A rank that never completes init holds up every rank's first collective.

What to do
    (1) Give every process the same rendezvous (MASTER_ADDR/MASTER_PORT, NCCL_COMM_ID, the same
    torchrun --rdzv-endpoint); for nccl-tests under mpirun, build it with MPI=1. (2) Start each
    rank once; give concurrent jobs different ports. (3) Look at the named ranks' last NCCL
    lines (the connection they were setting up) and their peers.

Known false positives
    Jobs that deliberately split into independent groups (ensembles, pipeline stages run as
    separate jobs) look like (1); so do excerpts that hold only a subgroup's lines. Pasted
    excerpts cut before a rank's ``Init COMPLETE`` look like (3): without a failure or hang in
    the inputs that case is only a warning. Communicators without a commId (NCCL before 2.16)
    are grouped by a heuristic and are not judged here.
"""

from __future__ import annotations

import polars as pl

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.rules.base import Context, Finding, with_columns
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.network.transport_model import evidence_of

RULE = Rule(code="N015", name="comm-not-formed", severity=Severity.ERROR, category=Category.CONFIG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    members = with_columns(ctx.table("nccl_members"), comm_key=pl.String, comm_id=pl.String, rank=pl.Int64,
                           nranks=pl.Int64, host=pl.String, pid=pl.Int64, cuda_dev=pl.Int64, completed=pl.Boolean,
                           global_rank=pl.Int64, identified_by=pl.String, input_id=pl.UInt32, line_no=pl.UInt32,
                           parent=pl.String, complete_line=pl.UInt32)
    if members.is_empty():
        return []
    by_id = members.filter((pl.col("identified_by") == "commId") & pl.col("comm_id").is_not_null())
    failing = ctx.outcome.get("outcome") in ("failed", "hung")
    out = []
    out += _split_job(ctx, members, by_id, failing)
    out += _duplicates(ctx, by_id)
    out += _incomplete(ctx, by_id, failing)
    return out


def _split_job(ctx: Context, members: pl.DataFrame, by_id: pl.DataFrame, failing: bool) -> list[Finding]:
    if by_id.is_empty():
        return []
    procs = members.select("host", "pid", "cuda_dev").unique()
    per_proc = members.group_by("host", "pid", "cuda_dev").agg(n=pl.col("comm_key").n_unique())
    comms = by_id.group_by("comm_id").agg(nranks=pl.col("nranks").max(), seen=pl.col("rank").n_unique(),
                                          hosts=pl.col("host").unique().sort(), split=pl.col("parent").is_not_null().any(),
                                          first=pl.col("line_no").min(), input_id=pl.col("input_id").first())
    if comms.height < 2 or comms["split"].any():
        return []
    sizes = set(comms["nranks"].to_list())
    if len(sizes) != 1 or not (per_proc["n"] == 1).all():
        return []      # subgroups of a bigger job (each process in several communicators), or sizes differ
    size = sizes.pop()
    if size is None or procs.height <= size or members["nranks"].max() > size:
        return []
    # The job's stated size may itself come from these communicators' nranks: named only when larger.
    world = ctx.world_size if ctx.world_size and ctx.world_size > size else None
    ids = comms.sort("first")["comm_id"].to_list()
    groups = "; ".join(f"{cid}: {r['seen']} of {r['nranks']} ranks on {hostlist(r['hosts'])}"
                       for cid, r in zip(ids, comms.sort("first").iter_rows(named=True)))
    nodes = sorted(set(members["host"].drop_nulls().to_list()))
    message = (f"{procs.height} processes formed {comms.height} separate {size}-rank communicators ({groups}) instead "
               f"of one{f' of {world} ranks (the job size)' if world else ''}: every process is in one of them only, "
               "so each group ran as a job of its own -- each with its own rank 0 and its own rendezvous")
    evidence = evidence_of(ctx, by_id.sort("input_id", "line_no").unique("comm_id", keep="first", maintain_order=True),
                           "its own communicator (commId) of this size", 3)
    return [RULE.finding(severity=RULE.severity if failing else Severity.WARNING, confidence=0.75,
                    title=f"{comms.height} separate {size}-rank communicators instead of one", message=message,
                    nodes=nodes, evidence=evidence, culprit=False,
                    suggestion=("Give every process the same rendezvous: one MASTER_ADDR/MASTER_PORT (or NCCL_COMM_ID, "
                                "torchrun --rdzv-endpoint) for all nodes; for nccl-tests under mpirun, build with MPI=1 "
                                "(otherwise each process thinks it is alone or rank 0)."),
                    details={"check": "split_job", "comm_ids": ids, "size": size, "processes": procs.height,
                             "drain": False})]


def _duplicates(ctx: Context, by_id: pl.DataFrame) -> list[Finding]:
    if by_id.is_empty():
        return []
    dup = by_id.group_by("comm_id", "rank").agg(n=pl.struct("host", "pid").n_unique(), hosts=pl.col("host").unique().sort(),
                                                pids=pl.col("pid").unique().sort()).filter(pl.col("n") > 1)
    if dup.is_empty():
        return []
    rows = by_id.join(dup.select("comm_id", "rank"), on=["comm_id", "rank"], how="semi")
    parts = [f"rank {r['rank']} of {r['comm_id']} held by pids {', '.join(str(p) for p in r['pids'] if p is not None) or '?'} on "
             f"{hostlist([h for h in r['hosts'] if h])}" for r in dup.head(6).iter_rows(named=True)]
    nodes = sorted({h for hs in dup["hosts"].to_list() for h in hs if h})
    return [RULE.finding(confidence=0.8, title=f"the same rank held by two processes in {dup['comm_id'].n_unique()} "
                    "communicator(s)", message="; ".join(parts) + ": a duplicated launch, a wrong RANK/LOCAL_RANK, or two jobs "
                    "sharing one rendezvous", nodes=nodes, evidence=evidence_of(ctx, rows, "one of the two", 3),
                    culprit=False,
                    suggestion="Start each rank once (no leftover process from an earlier run, no second launcher); "
                               "give concurrent jobs different MASTER_PORT / NCCL_COMM_ID.",
                    details={"check": "duplicate_rank", "duplicates": dup.select("comm_id", "rank", "pids").to_dicts(),
                             "drain": False})]


def _incomplete(ctx: Context, by_id: pl.DataFrame, failing: bool) -> list[Finding]:
    if by_id.is_empty():
        return []
    state = by_id.group_by("comm_id").agg(done=pl.col("completed").fill_null(False).sum(), n=pl.len())
    mixed = state.filter((pl.col("done") > 0) & (pl.col("done") < pl.col("n")))["comm_id"].to_list()
    if not mixed:
        return []
    stuck = by_id.filter(pl.col("comm_id").is_in(mixed) & ~pl.col("completed").fill_null(False))
    done = by_id.filter(pl.col("comm_id").is_in(mixed) & pl.col("completed").fill_null(False))
    glob = sorted(set(stuck["global_rank"].drop_nulls().to_list()))
    nodes = sorted(set(stuck["host"].drop_nulls().to_list()))
    few = stuck.height < done.height
    parts = [f"rank {r['rank']} of {r['comm_id']} on {r['host'] or '?'} GPU {r['cuda_dev'] if r['cuda_dev'] is not None else '?'} "
             f"(pid {r['pid'] if r['pid'] is not None else '?'})" for r in stuck.head(8).iter_rows(named=True)]
    message = (f"{stuck.height} rank(s) started NCCL init but never printed Init COMPLETE while {done.height} rank(s) of "
               f"the same communicator(s) did: {'; '.join(parts)}"
               + (f"; global rank {rank_ranges(glob)}" if glob else "")
               + ("" if failing else "; the inputs show no failure or hang, so a log cut before that line would look "
                                     "the same"))
    culprit = failing and few and bool(glob)
    return [RULE.finding(severity=RULE.severity if failing else Severity.WARNING, confidence=0.65 if culprit else 0.4,
                    title=f"rank(s) {rank_ranges(sorted(set(stuck['rank'].to_list())))} never completed NCCL init"
                    + (f" on {hostlist(nodes)}" if nodes else ""), message=message,
                    ranks=glob if culprit else [], nodes=nodes if culprit else [],
                    gpus=[ctx.gpu_of(r) for r in glob[:4]] if culprit else [],
                    evidence=evidence_of(ctx, stuck, "Init START, no Init COMPLETE", 2)
                    + evidence_of(ctx, done.filter(pl.col("complete_line").is_not_null()).select(
                        "input_id", line_no="complete_line"), "another rank's Init COMPLETE", 1),
                    category=Category.HANG, culprit=culprit,
                    suggestion="Read the named ranks' last NCCL lines (the connection they were setting up) and their "
                               "peers'; a py-spy dump of them shows where init waits.",
                    details={"check": "init_incomplete", "comm_ids": mixed, "stuck": stuck.select(
                        "comm_id", "rank", "host", "pid", "global_rank").to_dicts(), "drain": False})]
