"""The data model of one generated run: attempts, waiting ranks, and what gets written."""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import Agent, Cluster, Line, Proc
from .c10d import PG, Work
from .elastic import AgentLog


@dataclass
class Waiter:
    """A rank that enqueued a collective that never completes."""

    proc: Proc
    pg: PG
    pg_rank: int
    work: Work
    delay: float = 0.0                 # enqueues this long after the hang starts (downstream waiters)
    enqueued: float = 0.0
    detected: float | None = None
    ran_for_ms: int = 0


@dataclass
class Attempt:
    index: int
    t0: float
    procs: list[Proc] = field(default_factory=list)
    agents: list[Agent] = field(default_factory=list)
    agent_logs: list[AgentLog] = field(default_factory=list)
    t_pg_init: dict[int, float] = field(default_factory=dict)
    t_train0: float = 0.0
    iteration_ends: list[float] = field(default_factory=list)
    seq_rate: dict[int, float] = field(default_factory=dict)        # collectives per second, per PG uid
    world_ptrs: dict[int, str] = field(default_factory=dict)        # rank -> world communicator pointer
    frozen: dict[tuple[int, int], tuple[float, int, int]] = field(default_factory=dict)  # (rank, pg uid)
    agent_exit: dict[int, float] = field(default_factory=dict)
    end_t: float = 0.0

    def node_procs(self, node: int) -> list[Proc]:
        """The workers of one node (procs are in global-rank order, node by node)."""
        per_node = len(self.procs) // len(self.agents)
        return self.procs[node * per_node:(node + 1) * per_node]


@dataclass
class Run:
    cluster: Cluster
    attempts: list[Attempt]
    job_lines: list[Line]
    pyspy: dict[tuple[str, int], str]
    env: dict[str, str]
    torn: tuple[int, int, str] | None           # (attempt, rank, stream) whose last line was cut by the kill
    run_dirs: dict[int, str]                     # torchrun --log-dir subfolder per node
    truth: dict
