"""How far a job's start-up got, per node and per rank (not a rule; H007 and X002 share it).

Stages, in order (``docs/formats/pytorch-failures.md`` 7.2, ``docs/formats/training-logs.md`` 1):

``scheduled``   the scheduler allocated the node (``job_nodes``: sacct / scontrol / kubectl)
``launched``    the node wrote anything: its torchrun agent's banner, any line attributed to it
``workers``     worker processes ran on it (a rendezvous completed): c10d, NCCL, framework lines
``nccl_init``   an NCCL communicator reached ``Init COMPLETE`` on it (lazy init: optional)
``training``    an iteration line

The expected size comes from the scheduler (nodes), the agents' launch configs (``min_nodes`` /
``max_nodes``: elastic), and at rank level from the store barrier (``world_size=N,
worker_count=k``), the TCPStore (``k/N clients joined``), Lightning's ``MEMBER: i/N`` lines and
NCCL's ``nranks``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import polars as pl

from postmortem.rules.base import Context, memoised, with_columns

STAGES = ("scheduled", "launched", "workers", "nccl_init", "training")
_BARRIER = re.compile(r"rank: (?P<rank>\d+).*\(world_size=(?P<world>\d+), worker_count=(?P<count>\d+), "
                      r"timeout=(?P<timeout>[^)]*)\)")
_CLIENTS = re.compile(r"Timed out after (?P<secs>\d+) seconds waiting for clients\. (?P<count>\d+)/(?P<world>\d+) "
                      r"clients joined")
_WORKER_TABLES = ("progress", "collectives", "iterations", "nccl_processes", "stacks", "memory", "settings")


@dataclass
class InitPicture:
    trained: bool = False
    nodes: dict[str, set[str]] = field(default_factory=dict)     # stage -> nodes seen at it
    min_nodes: int | None = None
    max_nodes: int | None = None
    world: int | None = None                 # expected ranks (rank-level sources)
    world_source: str | None = None
    arrived: int | None = None               # ranks that reached the init barrier / store
    arrived_source: str | None = None
    arrived_ranks: list[int] = field(default_factory=list)
    init_ranks: list[int] = field(default_factory=list)   # ranks seen at init_process_group (per-rank lines)
    timeout: str | None = None
    failure: dict | None = None              # the first init/rendezvous error row
    barrier: dict | None = None              # the store-barrier / store-timeout row
    refs: dict = field(default_factory=dict)  # node -> (input_id, line_no) of a scheduler row

    def missing_nodes(self) -> list[str]:
        scheduled = self.nodes.get("scheduled", set())
        return sorted(scheduled - self.nodes.get("launched", set()))

    def last_stage(self, node: str) -> str | None:
        reached = [s for s in STAGES if node in self.nodes.get(s, set())]
        return reached[-1] if reached else None


@memoised
def init_picture(ctx: Context) -> InitPicture:
    pic = InitPicture()
    iterations = ctx.table("iterations")
    pic.trained = not iterations.is_empty()
    jobs = ctx.table("job_nodes")
    if not jobs.is_empty() and "node" in jobs.columns:
        pic.nodes["scheduled"] = set(jobs["node"].drop_nulls().to_list())
        pic.nodes["launched"] = set(jobs.filter(pl.col("has_logs").fill_null(False))["node"].drop_nulls().to_list())
        for node, i, n in jobs.select("node", "input_id", "line_no").iter_rows():
            pic.refs.setdefault(node, (i, n))
    agent = with_columns(ctx.table("agent"), value=pl.String)  # only key/value lines of the agent fill value
    if not agent.is_empty() and "key" in agent.columns:
        pic.nodes.setdefault("launched", set()).update(agent["node"].drop_nulls().to_list())
        keys = agent["key"].cast(pl.String)     # Series work, not a query per key
        for key in ("min_nodes", "max_nodes"):
            values = agent["value"].filter(keys == key).cast(pl.Int64, strict=False).drop_nulls()
            if len(values):
                setattr(pic, key, int(values.max()))
    workers: set[str] = set()
    for name in _WORKER_TABLES:
        t = ctx.table(name)
        if name == "stacks" and "source" in t.columns:
            t = t.filter(pl.col("source").fill_null("pyspy") != "traceback")  # the agent's own traceback
        if not t.is_empty() and "node" in t.columns and t.schema["node"] == pl.String:
            workers.update(t["node"].drop_nulls().to_list())
    members = ctx.table("nccl_members")
    if not members.is_empty() and "host" in members.columns:
        workers.update(members["host"].drop_nulls().to_list())
        done = members.filter(pl.col("completed").fill_null(False)) if "completed" in members.columns else members
        pic.nodes["nccl_init"] = set(done["host"].drop_nulls().to_list())
        nranks = members["nranks"].drop_nulls()
        if len(nranks):
            pic.world, pic.world_source = int(nranks.max()), "NCCL nranks"
    pic.nodes["workers"] = workers
    if not iterations.is_empty() and "node" in iterations.columns:
        pic.nodes["training"] = set(iterations["node"].drop_nulls().to_list())
    _rank_level(ctx, pic)
    return pic


def _rank_level(ctx: Context, pic: InitPicture) -> None:
    events = ctx.table("events")
    if not events.is_empty() and "kind" in events.columns:
        errors = events.filter(pl.col("kind") == "rendezvous_error").sort("input_id", "line_no")
        if not errors.is_empty():
            pic.failure = errors.row(0, named=True)
            for row in errors.iter_rows(named=True):
                m = _CLIENTS.search(row.get("message") or row.get("detail") or "")
                if m:
                    pic.world, pic.world_source = int(m["world"]), "TCPStore (clients joined)"
                    pic.arrived, pic.arrived_source = int(m["count"]), "TCPStore clients joined"
                    pic.timeout = f"{m['secs']} s"
                    pic.barrier = row
                    break
        barrier = events.filter(pl.col("kind") == "store_barrier").sort("input_id", "line_no")
        for row in barrier.iter_rows(named=True):
            m = _BARRIER.search(row.get("message") or "")
            if not m:
                continue
            pic.world, pic.world_source = int(m["world"]), "store-based barrier world_size"
            pic.arrived, pic.arrived_source = int(m["count"]), "store-based barrier worker_count"
            pic.timeout = m["timeout"]
            pic.arrived_ranks = sorted(set(pic.arrived_ranks) | {int(m["rank"])})
            if "Timed out" in (row.get("message") or ""):
                pic.barrier = row
            elif pic.barrier is None:
                pic.barrier = row
    config = ctx.table("job_config")
    if not config.is_empty() and {"key", "value"} <= set(config.columns):
        worlds = config.filter(pl.col("key") == "world_size")["value"].cast(pl.Int64, strict=False).drop_nulls()
        ranks = config.filter(pl.col("key") == "global_rank")["value"].cast(pl.Int64, strict=False).drop_nulls()
        if len(worlds) and len(ranks) and pic.world is None:
            pic.world, pic.world_source = int(worlds.max()), "the framework's MEMBER i/N lines"
        if len(ranks):
            pic.init_ranks = sorted(set(ranks.to_list()))
