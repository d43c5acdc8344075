"""H007 init-hang: the job never got past start-up because ranks or nodes never arrived.

What it detects
    A job with no training step whose start-up stopped short of the expected size: the
    scheduler allocated nodes that never wrote a line (their torchrun agent never started)
    while the other agents waited in the rendezvous; or, at rank level, a store-based init
    barrier (``world_size=N, worker_count=k``), a TCPStore (``k/N clients joined``) or
    Lightning's ``MEMBER: i/N`` lines show fewer ranks at ``init_process_group`` than expected.
    Stages compared: scheduled, launched (agent banner), workers running (after the
    rendezvous), NCCL ``Init COMPLETE``, first step. The finding names the missing node and
    the last stage it reached.

Why it matters
    The ranks that report the timeout are the ones that *arrived*: blaming them (or the
    rendezvous host) drains the wrong node. The culprit is the node or rank that never came.

What to do
    For a node with no log at all: check it on the scheduler side (``sacct -j JOB -o
    JobID,NodeList,State,ExitCode`` per step, the node's slurmd / container runtime logs, the
    image pull) and exclude it (``--exclude``) to restart. For ranks that arrive late: they
    were busy before ``init_process_group`` (data loading, tokenisation, a download); move
    that work after init or raise the init timeout (``init_process_group(timeout=...)``,
    ``--rdzv-conf timeout=...``); and keep every rank's log so the late one shows.

Known false positives
    Elastic jobs (``--nnodes MIN:MAX``) form with fewer nodes than allocated: no finding while
    at least ``min_nodes`` launched. NCCL communicators are initialised lazily at the first
    collective, so a missing ``Init COMPLETE`` alone is no shortfall. A log folder that holds
    only some ranks' files looks like missing ranks: when the evidence is only "not in the
    inputs", the finding names no culprit.
"""

from __future__ import annotations

from postmortem.analyzer.ranges import hostlist, rank_ranges
from postmortem.analyzer import commands
from postmortem.rules.base import Context, Finding
from postmortem.rules.declare import Category, Rule, Severity
from postmortem.rules.hang.init_model import init_picture

RULE = Rule(code="H007", name="init-hang", severity=Severity.ERROR, category=Category.HANG, since="0.1.0")


def check(ctx: Context) -> list[Finding]:
    pic = init_picture(ctx)
    if pic.trained:
        return []
    node_level = _missing_nodes(ctx, pic)
    if node_level:
        return node_level
    return _missing_ranks(ctx, pic)


def _missing_nodes(ctx: Context, pic) -> list[Finding]:
    missing = pic.missing_nodes()
    launched = pic.nodes.get("launched", set()) & pic.nodes.get("scheduled", set())
    if not missing or not launched:
        return []
    if pic.min_nodes is not None and len(launched) >= pic.min_nodes:
        return []  # elastic: enough nodes to form without them
    stuck = pic.failure is not None or not pic.nodes.get("workers")
    if not stuck:
        return []
    want = f"min_nodes={pic.min_nodes}" if pic.min_nodes is not None else f"{len(pic.nodes['scheduled'])} allocated"
    last = ("the rendezvous (their agents started and waited)" if not pic.nodes.get("workers")
            else "running workers")
    what = (f"the rendezvous timed out ({pic.failure.get('detail')})" if pic.failure is not None
            else "the logs end before any worker started")
    message = (f"the scheduler allocated {len(pic.nodes['scheduled'])} node(s) ({want}); {len(launched)} started "
               f"their launcher and reached {last}, but {', '.join(missing)} never wrote a line (last stage: "
               f"scheduled, the torchrun agent never started); {what}, so no worker ever ran")
    evidence = [ctx.evidence(*pic.refs[n], note="the scheduler's record lists this node") for n in missing[:2]
                if n in pic.refs]
    if pic.failure is not None:
        evidence.append(ctx.evidence(pic.failure["input_id"], pic.failure["line_no"],
                                     note="a node that arrived, waiting for the missing one (a symptom)"))
    stages = {n: pic.last_stage(n) for n in sorted(pic.nodes.get("scheduled", set()))}
    return [RULE.finding(confidence=0.8, title=f"node {', '.join(missing)} never joined the job (its agent never started)",
        message=message, nodes=missing, evidence=evidence, culprit=True,
        suggestion=(f"Check {', '.join(missing)} on the scheduler side (slurmd log, container runtime, image pull; "
                    f"`sacct -j JOB -o JobID,NodeList,State,ExitCode`) and resubmit without it: "
                    f"`sbatch {commands.sh('--exclude=' + (hostlist(commands.hosts(missing)[0]) or 'NODE'))} ...`."),
        details={"missing_nodes": missing, "last_stage": {n: stages[n] or "scheduled" for n in missing},
                 "node_stages": stages, "min_nodes": pic.min_nodes, "max_nodes": pic.max_nodes,
                 "expected_nodes": len(pic.nodes["scheduled"]), "launched_nodes": sorted(launched)})]


def _missing_ranks(ctx: Context, pic) -> list[Finding]:
    world = pic.world
    seen = pic.arrived if pic.arrived is not None else (len(pic.init_ranks) if pic.init_ranks else None)
    if world is None or seen is None or seen >= world:
        return []
    if pic.arrived is None and not pic.init_ranks:
        return []
    known = pic.arrived_ranks or pic.init_ranks
    missing_n = world - seen
    timed_out = pic.barrier is not None and "Timed out" in (pic.barrier.get("message") or "")
    how = (f"the init barrier timed out after {pic.timeout}" if timed_out and pic.timeout else
           "the logs end there, with no training step")
    arrived = f"rank {rank_ranges(known)}" if known else f"{seen} rank(s)"
    # When the barrier timed out with a stated count of arrivals and who arrived is stated too
    # (rank 0: worker_count=1 is rank 0 itself), the ranks that never came are known, though not
    # why. A count of the ranks whose logs are here (Lightning's MEMBER i/N) is not such a count.
    stated = timed_out and pic.arrived is not None and pic.arrived_ranks
    missing = sorted(set(range(world)) - set(known)) if stated and len(known) == seen else []
    where = (f"ranks {rank_ranges(missing)}" if len(missing) > 1 else f"rank {missing[0]}") if missing else ""
    message = (f"{seen} of {world} rank(s) reached init_process_group ({pic.arrived_source or pic.world_source}); "
               f"{how}. {arrived} arrived and waited: not the cause. "
               + (f"{where[0].upper() + where[1:]} never arrived -- still busy before init_process_group (data "
                  "loading, preprocessing, a download) or never started; their own logs say why"
                  if missing else
                  f"The other {missing_n} never arrived -- still busy before init_process_group (data loading, "
                  "preprocessing, a download) or never started; their logs are not in the inputs, so which one "
                  "is not known"))
    evidence = []
    if pic.barrier is not None:
        evidence.append(ctx.evidence(pic.barrier["input_id"], pic.barrier["line_no"], note="the rank that arrived"))
    title = (f"stuck at init: {where} never reached init_process_group" if missing else
             f"stuck at init: {seen} of {world} rank(s) reached init_process_group")
    return [RULE.finding(confidence=0.7 if missing else 0.5, title=title,
        message=message, ranks=missing, evidence=evidence, culprit=bool(missing),
        suggestion=("Collect every rank's log to see where the missing ranks were; move slow work that runs before "
                    "init_process_group (dataset loading or caching) after it, or raise the init timeout "
                    "(init_process_group(timeout=datetime.timedelta(minutes=60)))."),
        details={"expected_world": world, "world_source": pic.world_source, "arrived": seen,
                 "arrived_ranks": known, "missing": missing_n, "timeout": pic.timeout,
                 "last_stage_missing": "before init_process_group"})]
