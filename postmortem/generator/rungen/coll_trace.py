"""The full NCCL COLL trace of every rank (``RunSpec.coll_trace``, issue 11: a large run).

With ``NCCL_DEBUG_SUBSYS`` including COLL, NCCL prints one line per collective call per rank at
enqueue time (``nccl.md`` section 3.9). ``Story.first_collectives`` writes each rank's first three
(opCount 0-2 on the world communicator); with ``coll_trace`` this module writes everything the
ranks issue after them, every training iteration, on the communicators the init output printed:

* forward (5-30 % of the step): per MoE layer, the router's tokens-per-expert AllReduce on the
  node's expert communicator (``count 64``, float32, in place);
* backward (35-75 %): per layer bucket, in reverse layer order, the distributed optimizer's
  gradient ReduceScatter on the world communicator (bf16, ``count`` = the rank's shard, in place
  in the bucket's grad buffer, ``recvbuff = sendbuff + rank * count * 2``);
* the optimizer step (78 %): the grad-norm AllReduce (``count 1``, float32);
* after the step (82-90 %): per bucket, the parameter AllGather (bf16, in place in the param buffer);
* the training log (97 %): the loss AllReduce (``count 1``, float32).

opCount runs on per communicator (hex); buffers are fixed per bucket (Megatron's contiguous
buffers), the stream is the one ``first_collectives`` drew. The last iteration follows the story:
in a hang every rank issues the calls before the hung collective, the waiting ranks then the hung
one (a desync culprit its own op or size at the same opCount), a deadlock culprit nothing; with
``group="node"`` the other nodes complete the expert-group collective and wait in the loss
AllReduce. Earlier attempts and crashes stop at the first death: the survivors also print the
call they then wait in.

Lines are built per rank and per iteration as one block (one ``Line`` whose text holds many
physical lines), and lazily: the text is produced when the run is written, so a 2 GB trace is
never held in memory at once.
"""

from __future__ import annotations

import random

from .base import Line, next_order
from .c10d import Work

LAYERS = 28                 # --num-layers of the modelled job (story.COMMAND)
EXPERTS = 64                # --num-experts
NCCL_OPS = {"_ALLGATHER_BASE": "AllGather", "ALLGATHER": "AllGather", "ALLGATHER_COALESCED": "AllGather",
            "_REDUCE_SCATTER_BASE": "ReduceScatter", "REDUCE_SCATTER": "ReduceScatter",
            "ALLREDUCE": "AllReduce", "ALLREDUCE_COALESCED": "AllReduce", "BARRIER": "AllReduce",
            "BROADCAST": "Broadcast", "REDUCE": "Reduce", "ALLTOALL_BASE": "AlltoAll", "ALLTOALL": "AlltoAll"}
HANG_SCENARIOS = ("deadlock", "desync-op", "desync-size", "all-stuck")
WORLD, EXPERT = 1, 0        # comm index in a call tuple


def calls_per_iteration() -> dict[str, int]:
    return {"world": 2 * LAYERS + 2, "expert": LAYERS}


def validate(spec) -> None:
    """``coll_trace`` needs NCCL INFO output with COLL shown and an op NCCL has a name for."""
    from .nccl import NcclVersion
    from .nccl_topology import subsys_names

    if not spec.coll_trace:
        return
    inverted, names = subsys_names(spec.nccl_subsys or "")
    shown = bool(names & {"COLL", "ALL"}) != inverted if spec.nccl_subsys else False
    if not spec.nccl_debug or not shown:
        raise ValueError("coll_trace needs nccl_debug and COLL in nccl_subsys (e.g. INIT,ENV,COLL)")
    name = NCCL_OPS.get(spec.op)
    if name is None or (name == "AlltoAll" and not NcclVersion.parse(spec.nccl_version).at_least(28)):
        raise ValueError(f"coll_trace: no NCCL COLL line for op {spec.op!r} in NCCL {spec.nccl_version}")


class TraceBlock(Line):
    """Consecutive COLL lines of one rank, built when the text is read (never stored)."""

    multiline = True         # layout.py: an srun label goes in front of every physical line

    def __init__(self, t: float, calls: list[tuple[int, int, str, str]], world_base: int, expert_base: int):
        self.t, self.order, self.stream = t, next_order(), "out"
        self._calls, self._wb, self._eb = calls, world_base, expert_base

    @property
    def text(self) -> str:       # noqa: D401 - the dataclass field, computed
        wb, eb = self._wb, self._eb
        return "\n".join([f"{h}{(wb if c else eb) + o:x}{t}" for c, o, h, t in self._calls])

    def __repr__(self) -> str:
        return f"TraceBlock(t={self.t}, order={self.order}, lines={len(self._calls)})"


class _Rank:
    """One rank's calls: the iteration pattern as (comm, offset, head, tail) with the call's
    position in the step, and the hang's calls."""

    def __init__(self, story, attempt, proc):
        spec, nlog = story.spec, story.nlog(proc)
        self.proc, self.nlog = proc, nlog
        self.world, self.expert = story.nccl_comms[(attempt.index, proc.rank)][:2]
        self.stream = story.coll_streams[(attempt.index, proc.rank)]
        self.prefix = nlog.info(proc.pid, "")
        self.bf16 = 9 if nlog.v.at_least(10) else 6
        rng = random.Random(f"coll-trace-{spec.seed}-{attempt.index}-{proc.rank}")
        page = lambda: 0x7F0000000000 + (rng.randrange(1 << 24) << 12)     # noqa: E731 - device memory
        self.count = spec.numel_in
        shard = self.count * 2
        bucket = shard * self.world.nranks
        self.grads, self.params = page(), page() + (1 << 36)
        routers = [page() + 0x200 * layer for layer in range(LAYERS)]
        small = [page() + 0x200, page() + 0x400]
        me = self.world.rank
        pattern = []           # (fraction of the step, comm, name, count, dtype, send, recv)
        for layer in range(LAYERS):
            pattern.append((0.05 + 0.25 * layer / LAYERS, EXPERT, "AllReduce", EXPERTS, 7, routers[layer], routers[layer]))
        for j, b in enumerate(reversed(range(LAYERS))):
            send = self.grads + b * bucket
            pattern.append((0.35 + 0.40 * j / LAYERS, WORLD, "ReduceScatter", self.count, self.bf16, send, send + me * shard))
        pattern.append((0.78, WORLD, "AllReduce", 1, 7, small[0], small[0]))
        for b in range(LAYERS):
            recv = self.params + b * bucket
            pattern.append((0.82 + 0.08 * b / LAYERS, WORLD, "AllGather", self.count, self.bf16, recv + me * shard, recv))
        pattern.append((0.97, WORLD, "AllReduce", 1, 7, small[1], small[1]))
        self.fracs = [p[0] for p in pattern]
        offsets = {WORLD: 0, EXPERT: 0}
        self.calls = []
        for _, comm, name, count, dtype, send, recv in pattern:
            self.calls.append(self.call(comm, offsets[comm], name, count, dtype, send, recv))
            offsets[comm] += 1

    def call(self, comm: int, offset: int, name: str, count: int, dtype: int, send: int, recv: int):
        line = self.nlog.coll_line(self.world if comm == WORLD else self.expert, name, 0, f"0x{send:x}",
                                   f"0x{recv:x}", count, dtype, self.stream)
        head, sep, tail = line.partition(" opCount 0 ")
        assert sep, line
        return comm, offset, f"{self.prefix}{head} opCount ", f" {tail}"

    def hung_call(self, comm: int, offset: int, work: Work):
        """The collective a rank enqueues and waits in (``work``: the c10d view of it)."""
        name = NCCL_OPS[work.op]
        nranks = (self.world if comm == WORLD else self.expert).nranks
        me = (self.world if comm == WORLD else self.expert).rank
        count = {"AllGather": work.numel_in, "ReduceScatter": work.numel_out,
                 "AlltoAll": max(1, work.numel_in // nranks)}.get(name, work.numel_in)
        shard, base = count * 2, (self.params if name in ("AllGather", "Broadcast") else self.grads)
        send, recv = {"AllGather": (base + me * shard, base),
                      "ReduceScatter": (base, base + me * shard)}.get(name, (base, base))
        return self.call(comm, offset, name, count, self.bf16, send, recv)


def add_coll_trace(story, run) -> None:
    """Append every rank's COLL blocks to its lines; ``run.truth["coll_trace"]`` counts them."""
    spec, total = story.spec, 0
    per = calls_per_iteration()
    for attempt in run.attempts:
        last = attempt is run.attempts[-1]
        ends = attempt.iteration_ends
        starts = [attempt.t_train0] + ends[:-1]
        exits = [p.exit_t for p in attempt.procs if p.exit_t is not None]
        t_first_death = min(exits) if exits else None
        for proc in attempt.procs:
            if (attempt.index, proc.rank) not in story.coll_streams or not story.nlog(proc).shows("COLL"):
                continue
            rank = _Rank(story, attempt, proc)
            alive = (lambda t: proc.exit_t is None or t < proc.exit_t)
            wb, eb = 3, 0            # first_collectives printed opCounts 0-2 on the world comm
            for start, end in zip(starts, ends):
                t = start + 0.05 * (end - start)
                if not alive(t):
                    break
                proc.lines.append(TraceBlock(t, rank.calls, wb, eb))
                total += len(rank.calls)
                wb, eb = wb + per["world"], eb + per["expert"]
            step_start = ends[-1] if ends else attempt.t_train0
            times = [step_start + f * spec.step_s for f in rank.fracs]
            if last and spec.scenario == "healthy":
                continue
            if last and spec.scenario in HANG_SCENARIOS:
                total += _hang_tail(story, attempt, rank, times, wb, eb)
            elif t_first_death is not None:
                total += _death_tail(rank, times, t_first_death, wb, eb)
    run.truth["coll_trace"] = {"lines": total, "calls_per_iteration": per, "first_world_op_count": 3}


def _emit(rank: _Rank, t: float, calls, wb: int, eb: int) -> int:
    if calls and (rank.proc.exit_t is None or t < rank.proc.exit_t):
        rank.proc.lines.append(TraceBlock(t, calls, wb, eb))
        return len(calls)
    return 0


def _death_tail(rank: _Rank, times: list[float], t_dead: float, wb: int, eb: int) -> int:
    """A crash: the calls before the first death, and for a survivor the call it then waits in."""
    limit = min(t_dead, rank.proc.exit_t if rank.proc.exit_t is not None else t_dead)
    n = sum(1 for t in times if t < limit)
    written = _emit(rank, times[0], rank.calls[:n], wb, eb) if n else 0
    if n < len(times) and times[n] >= t_dead:
        written += _emit(rank, times[n], rank.calls[n:n + 1], wb, eb)
    return written


def _hang_tail(story, attempt, rank: _Rank, times: list[float], wb: int, eb: int) -> int:
    """The hung iteration: the calls before the hung collective, then the one this rank waits in."""
    spec, proc = story.spec, rank.proc
    node_group = spec.group == "node"
    # Default PG: the hang replaces the first parameter AllGather; EP group: it comes after them.
    cut = 2 * LAYERS + 1 + (LAYERS if node_group else 0)
    written = _emit(rank, times[0], rank.calls[:cut], wb, eb)
    w_off = LAYERS + 1 + (LAYERS if node_group else 0)      # world calls before the hung one
    state = attempt.frozen.get((proc.rank, 2 if node_group else 0))
    seq = spec.node_hang_seq if node_group else spec.hang_seq
    if state and state[1] == seq:                              # entered the hung collective
        group = rank.expert.nranks if node_group else rank.world.nranks
        numel_out = spec.numel_out if spec.numel_out is not None else story.numel_out(spec.op, spec.numel_in, group)
        work = Work(seq, spec.op, spec.numel_in, numel_out, spec.timeout_s * 1000)
        if proc.rank == spec.culprit and spec.scenario.startswith("desync"):
            work = story.desync_work(work, group)
        call = rank.hung_call(EXPERT if node_group else WORLD, LAYERS if node_group else w_off, work)
        written += _emit(rank, state[0], [call], wb, eb)
    if node_group:
        down = attempt.frozen.get((proc.rank, 0))
        if down and down[1] == spec.hang_seq:                  # the others wait in the loss AllReduce
            written += _emit(rank, down[0], rank.calls[-1:], wb, eb)
    return written
