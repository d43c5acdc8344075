"""The timeline of one generated run: who prints what, when, and how every process ends.

A run is one or more attempts. Every attempt starts the same way (agents, NCCL init, Megatron
startup, training iterations); the last one ends the way the scenario says (deadlock, desync,
all-stuck, healthy); earlier ones crash with a CUDA OOM on one rank and are restarted (torchrun
``--max-restarts``) or requeued (Slurm).

Time is seconds since the job started; ``rng`` is the only source of variation, so a seed fixes
every byte.
"""

from __future__ import annotations

import random

from . import frameworks, megatron, node_config, numerics
from .base import Agent, Clock, Cluster, Line, Proc, comm_id, jitter, next_order, pointer
from .c10d import PG, C10dLog, Work
from .elastic import AgentLog
from .node_logs import SkewedClock, skew_node
from .endings import Endings
from .envdump import env_dump
from .eras import Era
from .megatron import MEGATRON_ROOT, megatron_oom
from .nccl import Comm, NcclLog, NcclVersion
from .nccl_topology import NcclSetup
from .nccl_truth import NcclTruth
from .pyspy import CULPRIT_MAIN, DOWNSTREAM_MAIN, WAITING_MAIN, collective_frames, dump
from .run import Attempt, Run, Waiter

HEALTHY_EXTRA_ITERATIONS = 20
COMMAND = ("/usr/bin/python -u pretrain_gpt.py --tensor-model-parallel-size 1 --pipeline-model-parallel-size 1 "
           "--expert-model-parallel-size 8 --num-experts 64 --moe-router-topk 6 --num-layers 28 --hidden-size 2048 "
           "--seq-length 4096 --micro-batch-size 1 --global-batch-size 640 --bf16 --use-distributed-optimizer "
           f"--data-path {megatron.DATA_PATH} --save {megatron.CHECKPOINT_DIR} --load {megatron.CHECKPOINT_DIR}")


class Story(Endings):
    """Builds a ``Run`` from a ``RunSpec``: the startup, training, and the scenario's ending."""

    def __init__(self, spec, cluster: Cluster, era: Era, nccl: NcclVersion, clock: Clock):
        self.spec, self.cluster, self.era, self.nccl, self.clock = spec, cluster, era, nccl, clock
        self.rng = random.Random(spec.seed)
        self.job_lines: list[Line] = []
        self.pyspy: dict[tuple[str, int], str] = {}
        self.torchrun = spec.launcher in ("torchrun-logdir", "srun-torchrun")
        self.world_pg = PG(0, "0", "default_pg", cluster.world)
        self.c10d: dict[tuple[int, int], C10dLog] = {}
        self.torn: tuple[int, int, str] | None = None
        self.truth: dict = {}
        self.agents_seen: dict[int, tuple[int, int]] = {}
        self.nccl_setup = NcclSetup(
            gpus_per_node=cluster.gpus_per_node, fabric=spec.nccl_fabric, gdr=spec.nccl_gdr, pxn=spec.nccl_pxn,
            intra=spec.nccl_intra, cumem=spec.nccl_cumem, shm_node=spec.nccl_shm_node,
            bootstrap_if=tuple(sorted(spec.nccl_bootstrap_if.items())), nvls=spec.nccl_nvls,
            connections=spec.nccl_connections, subsys=spec.nccl_subsys, env=tuple(spec.nccl_env.items()),
            world=cluster.world)
        self.nccl_truth = NcclTruth(nccl.text)
        # NCCL detail that older generator versions did not write draws from its own stream, so
        # that the default output stays byte-identical.
        self.nrng = random.Random(f"nccl-{spec.seed}")
        self.nccl_comms: dict[tuple[int, int], list[Comm]] = {}      # (attempt, rank) -> world, expert comm
        self.coll_streams: dict[tuple[int, int], str] = {}           # (attempt, rank) -> the training stream

    # -- identities --------------------------------------------------------------------

    def ep_pg(self, node: int) -> PG:
        # Every rank calls new_group for every EP group, so each node's group has its own GUID.
        return PG(2, str(5 + node), "EXPERT_MODEL_PARALLEL_GROUP", self.cluster.gpus_per_node)

    def log_of(self, proc: Proc) -> C10dLog:
        key = (proc.attempt, proc.rank)
        if key not in self.c10d:
            self.c10d[key] = C10dLog(self.era, self.clock_of(proc.slot.node), proc.rank, self.rng)
        return self.c10d[key]

    def clock_of(self, node: int):
        """The clock a node's processes print with: the job clock, or skewed (RunSpec.clock_skew_s)."""
        skew = getattr(self.spec, "clock_skew_s", 0.0)
        if not skew or node != skew_node(self.spec, self.cluster):
            return self.clock
        return SkewedClock(self.clock, skew)

    def job(self, t: float, text: str) -> None:
        self.job_lines.append(Line(t, next_order(), "err", text))

    # -- the run ---------------------------------------------------------------------------

    def build(self) -> Run:
        spec = self.spec
        attempts, t, last_pids = [], 0.0, {}
        for index in range(spec.attempts):
            if index == 0 or spec.launcher != "torchrun-logdir":
                # The batch script's own echo; a requeued job runs the script again.
                self.job(t - 0.5, f"Job {self.cluster.job_id} on {self.cluster.nodelist()}: {self.cluster.world} "
                                  f"ranks, MASTER_ADDR={self.cluster.hosts[0]} MASTER_PORT=29500")
            attempt = self.start_attempt(index, t, last_pids)
            attempts.append(attempt)
            if index < spec.attempts - 1:
                self.crash_with_oom(attempt)
            elif spec.scenario == "healthy":
                self.finish_healthy(attempt)
            elif spec.scenario == "crash":
                self.crash_end(attempt)        # endings.py
            else:
                self.hang(attempt)
            self.emit_work_updates(attempt)
            self.emit_service_thread_closures(attempt)
            last_pids = {p.rank: p.pid for p in attempt.procs}
            # torchrun restarts within seconds; a requeued Slurm job waits for the scheduler.
            t = attempt.end_t + (12.0 if spec.launcher == "torchrun-logdir" else 95.0) + jitter(self.rng, 0, 3)
        run_dirs = {n: f"{self.cluster.job_id}_{_random_suffix(self.rng)}" for n in range(self.cluster.nodes)}
        self.truth.update(world_size=self.cluster.world, hosts=list(self.cluster.hosts), attempts=spec.attempts,
                          analysed_attempt=spec.attempts - 1)
        if spec.nccl_debug:
            self.truth["nccl"] = self.nccl_truth.finish([p for a in attempts for p in a.procs])
        return Run(self.cluster, attempts, self.job_lines, self.pyspy, self.env_dumps(), self.torn, run_dirs,
                   self.truth)

    # -- startup -----------------------------------------------------------------------------

    def start_attempt(self, index: int, t0: float, last_pids: dict[int, int]) -> Attempt:
        attempt = Attempt(index, t0)
        self.spawn(attempt, last_pids)
        self.start_agents(attempt)
        t_init = self.init_process_groups(attempt)
        for t, text in frameworks.after_init_chatter(self.spec, self.clock, t_init):
            attempt.procs[0].out(t, text)
        attempt.t_train0 = t_init + 32.2
        self.nccl_at_training_start(attempt)
        return attempt

    def spawn(self, attempt: Attempt, last_pids: dict[int, int]) -> None:
        """Agents and workers with real-looking pids: consecutive per node, fresh after a requeue."""
        rng = self.rng
        restart = bool(last_pids) and self.spec.launcher == "torchrun-logdir"
        for node in range(self.cluster.nodes):
            if restart:
                # The same agent restarts its workers: new pids just above the previous ones.
                agent_pid, ident = self.agents_seen[node]
                pid = max(last_pids[s.rank] for s in self.cluster.node_slots(node)) + rng.randrange(60, 400)
            else:
                agent_pid, ident = rng.randrange(30_000, 3_900_000), rng.randrange(1 << 46, 1 << 47)
                self.agents_seen[node] = (agent_pid, ident)
                pid = agent_pid + rng.randrange(8, 40)
            agent = Agent(node, self.cluster.hosts[node], agent_pid)
            attempt.agents.append(agent)
            attempt.agent_logs.append(AgentLog(self.era, self.clock, agent, ident))
            for slot in self.cluster.node_slots(node):
                pid += rng.randrange(1, 4)
                init = pid + rng.randrange(300, 1400)
                tids = {"init": init, "ep_init": init + rng.randrange(40, 300), "watchdog": init + rng.randrange(5, 30),
                        "monitor": init + rng.randrange(31, 39), "proxy": init + rng.randrange(600, 900),
                        "pin_memory": init + rng.randrange(1400, 2200), "pywatchdog": init + rng.randrange(2300, 2600)}
                attempt.procs.append(Proc(slot, attempt.index, pid, tids))

    def start_agents(self, attempt: Attempt) -> None:
        if not self.torchrun:
            return
        for log in attempt.agent_logs:
            t = attempt.t0 + 0.6 + 0.013 * log.agent.node
            if attempt.index > 0 and self.spec.launcher == "torchrun-logdir":
                continue        # a restart reuses the running agent: no new banner
            log.launch_configs(t, self.cluster.nodes, self.cluster.gpus_per_node, str(self.cluster.job_id),
                               f"{self.cluster.hosts[0]}:29400", self.max_restarts, "/logs")
            log.omp_banner(t + 0.4)

    @property
    def max_restarts(self) -> int:
        return self.spec.attempts - 1 if self.spec.launcher == "torchrun-logdir" else 0

    def init_process_groups(self, attempt: Attempt) -> float:
        """Megatron startup, PG creation banners and NCCL comm init; returns when model-parallel init ends."""
        rng, spec = self.rng, self.spec
        t_start = attempt.t0 + 2.4 + jitter(rng, 0, 0.3)
        for dt, text in frameworks.startup_chatter(self.spec, self.train_config(), self.clock, t_start + 1.5):
            attempt.procs[0].out(t_start + 1.5 + dt, text)
        world_ptrs = attempt.world_ptrs = {p.rank: pointer(rng) for p in attempt.procs}
        world_id = comm_id(rng)       # every attempt builds a new world communicator
        complete = []
        for proc in attempt.procs:
            t_pg = t_start + 3.8 + jitter(rng, 0, 0.3)
            attempt.t_pg_init[proc.rank] = t_pg
            self.pg_banners(proc, t_pg, self.world_pg, proc.rank)
            if spec.nccl_debug:
                nlog = self.nlog(proc)
                t_nccl = t_pg + 0.8 + jitter(rng, 0, 0.2)
                self._nccl_out(proc, t_nccl, nlog.process_start(proc.rank == 0))
                self.nccl_truth.process(nlog)
                comm = Comm(world_ptrs[proc.rank], proc.rank, self.cluster.world, world_id,
                            self.cluster.slots, key=world_id)
                self.nccl_comms[(attempt.index, proc.rank)] = [comm]
                total = jitter(rng, 2.2, 3.4)
                self._spread(proc, t_nccl + 0.25, total, nlog.comm_init(proc.tids["init"], comm, total, first=True))
                complete.append(t_nccl + 0.25 + total)
            else:
                complete.append(t_pg + 3.0)
        if spec.nccl_debug:
            self.nccl_truth.comm(self.nlog(attempt.procs[0]), self.nccl_comms[(attempt.index, 0)][0],
                                 {p.rank: p.pid for p in attempt.procs})
        t_init = max(complete) + 0.1
        self.init_expert_groups(attempt, t_init + 0.6, world_ptrs)
        return t_init

    def init_expert_groups(self, attempt: Attempt, t: float, world_ptrs: dict[int, str]) -> None:
        """The 8-rank EP communicator of each node, split from the world communicator (NCCL 2.18+;
        a communicator of its own with a fresh unique id before)."""
        rng = self.rng
        split = self.nccl.at_least(18)      # ncclCommSplit is 2.18+; before, a fresh ncclCommInitRank
        for node in range(self.cluster.nodes):
            pg = self.ep_pg(node)
            members = self.cluster.node_slots(node)
            ep_comm_id = comm_id(rng)
            color = 0x12345 + node
            # 2.23+ split comms print no commId: name them by rank 0's parent pointer and the color.
            key = f"{world_ptrs[members[0].rank]}/{color}" if self.nccl.at_least(23) else ep_comm_id
            for slot in members:
                proc = attempt.procs[slot.rank]
                self.pg_banners(proc, t + jitter(rng, 0, 0.05), pg, slot.local_rank)
                if not self.spec.nccl_debug:
                    continue
                comm = Comm(pointer(rng), slot.local_rank, len(members), ep_comm_id, members,
                            parent=world_ptrs[slot.rank] if split else None, color=color, key=key)
                self.nccl_comms[(attempt.index, slot.rank)].append(comm)
                total = jitter(rng, 0.7, 1.2)
                nlog = self.nlog(proc)
                self._spread(proc, t + 0.4 + jitter(rng, 0, 0.05), total,
                             nlog.comm_init(proc.tids["ep_init"], comm, total, first=False))
            if self.spec.nccl_debug:
                self.nccl_truth.comm(self.nlog(attempt.procs[members[0].rank]),
                                     self.nccl_comms[(attempt.index, members[0].rank)][1],
                                     {p.rank: p.pid for p in attempt.procs})

    def nccl_at_training_start(self, attempt: Attempt) -> None:
        """What NCCL prints once training starts: the first collectives (COLL, TUNING decisions),
        from 2.22 the ring/tree connections they trigger (on the calling thread), and with
        ``nccl_connections="full"`` the lazy point-to-point connections (2.12+, their own thread)."""
        if not self.spec.nccl_debug:
            return
        for proc in attempt.procs:
            nlog = self.nlog(proc)
            world, expert = self.nccl_comms[(attempt.index, proc.rank)]
            self.first_collectives(attempt, proc, nlog, world)
            self.connect_p2p(attempt, proc, nlog, world, expert)
            if not self.nccl.at_least(22):
                continue
            t = attempt.t_train0 + jitter(self.rng, 0.3, 0.5)
            self._nccl_out(proc, t, [nlog.info(proc.pid, text) for text in nlog.connect(world)])
            # The first MoE all-to-all connects the expert communicator a moment later.
            self._nccl_out(proc, t + jitter(self.rng, 1.5, 3.0), [nlog.info(proc.pid, text) for text in nlog.connect(expert)])

    def first_collectives(self, attempt: Attempt, proc: Proc, nlog: NcclLog, world: Comm) -> None:
        """COLL: each rank's first three collectives on the world comm; TUNING: rank 0's choice."""
        coll = nlog.shows("COLL")
        if not (coll or (nlog.shows("TUNING") and world.rank == 0)):
            return
        bf16 = 9 if self.nccl.at_least(10) else 6
        calls = (("AllReduce", 1, 7, 4, 0.1), ("AllGather", 1 << 20, bf16, 2, 4.0), ("ReduceScatter", 1 << 20, bf16, 2, 4.1))
        stream = pointer(self.nrng)
        self.coll_streams[(attempt.index, proc.rank)] = stream     # RunSpec.coll_trace goes on on this stream
        for op_count, (op, count, dtype, size, dt) in enumerate(calls):
            t = attempt.t_train0 + dt + jitter(self.nrng, 0, 0.05)
            send = f"0x7f{self.nrng.randrange(16 ** 7):07x}000"         # device buffers, page aligned
            recv = send if op == "AllReduce" else f"0x7f{self.nrng.randrange(16 ** 7):07x}000"
            lines = [nlog.coll_line(world, op, op_count, send, recv, count, dtype, stream)] if coll else []
            if nlog.shows("TUNING") and world.rank == 0:
                lines.append(nlog.decision_line(world, op, count * size))
            self._nccl_out(proc, t, [nlog.info(proc.pid, text) for text in lines if text])

    def connect_p2p(self, attempt: Attempt, proc: Proc, nlog: NcclLog, world: Comm, expert: Comm) -> None:
        """Lazy send/recv connections (connection index 1): the pipeline send to the next node on
        the world comm, the first all-to-all peer on the expert comm; each by a preconnect thread."""
        for comm, dt in ((world, 1.2), (expert, 3.6)):
            lines = nlog.connection_lines(comm, "p2p")
            if lines:
                tid = proc.tids["init"] + 2600 + self.nrng.randrange(40, 400)
                t = attempt.t_train0 + dt + jitter(self.nrng, 0, 0.2)
                self._nccl_out(proc, t, [nlog.info(tid, text) for text in lines])

    def pg_banners(self, proc: Proc, t: float, pg: PG, pg_rank: int) -> None:
        if not (self.spec.work_updates and self.era.env_banners):
            return
        trace_buffer = 2000 if self.era.stack_trace == "frames" else 0
        proc.err(t, *self.log_of(proc).init_banners(t, pg, pg_rank, self.spec.timeout_s * 1000,
                                                   node_config.nccl_version(self.spec, proc.slot.node, self.nccl).text,
                                                   1, trace_buffer))

    def nlog(self, proc: Proc) -> NcclLog:
        node = proc.slot.node   # a node may run its own NCCL build or env (RunSpec.node_nccl_version / node_env)
        return NcclLog(node_config.nccl_version(self.spec, node, self.nccl), proc.slot, proc.pid,
                       node_config.nccl_setup(self.spec, node, self.nccl_setup))

    def _nccl_out(self, proc: Proc, t: float, lines: list[str]) -> None:
        """Print NCCL messages at ``t``, recording them for ``truth["nccl"]``."""
        for text in lines:
            self.nccl_truth.emit(proc, t, text)

    def _spread(self, proc: Proc, t: float, span: float, lines: list[str]) -> None:
        """Print NCCL ``lines`` evenly over ``span`` seconds (init output is not instantaneous)."""
        step = span / max(1, len(lines) - 1)
        for i, text in enumerate(lines):
            self.nccl_truth.emit(proc, t + i * step, text)

    def train_config(self) -> megatron.TrainConfig:
        healthy = self.spec.scenario == "healthy"
        train_iters = self.spec.iterations_before_hang + HEALTHY_EXTRA_ITERATIONS if healthy else 50000
        return megatron.TrainConfig(world=self.cluster.world, ep=self.cluster.gpus_per_node, train_iters=train_iters,
                                    timeout_minutes=max(1, self.spec.timeout_s // 60))

    # -- training ------------------------------------------------------------------------------

    def train(self, attempt: Attempt, iterations: int) -> None:
        """Iterations 1..N: the last rank prints each iteration line, rank 0 the memory report."""
        rng, step = self.rng, self.spec.step_s
        itlog = frameworks.iteration_log(self.spec, self.train_config(), self.clock, rng)
        t = attempt.t_train0
        attempt.iteration_ends = []
        for it in range(1, iterations + 1):
            elapsed = step * (1.25 if it == 1 else 1.0 + rng.gauss(0, 0.004))
            t += elapsed
            attempt.iteration_ends.append(t)
            line = itlog.iteration_line(t, it, elapsed * 1000.0)
            if self.spec.nan_from_iteration and it >= self.spec.nan_from_iteration:
                line = numerics.poison(line)          # numerics.py: a NaN step (issue 9)
            attempt.procs[-1].out(t + 0.004, line)
            if it == 1 and hasattr(itlog, "params_report"):   # Megatron: theoretical memory report, rank 0
                attempt.procs[0].out(t + 0.005, *itlog.params_report())
            if it <= 2:
                if memory := itlog.memory_line(0, it):   # frameworks without a memory report print none
                    attempt.procs[0].out(t + 0.006, memory)

    def set_rates(self, attempt: Attempt, t_ref: float, seq_at_ref: dict[int, int]) -> None:
        """Collectives per second per PG, so that PG ``uid`` has completed ``seq_at_ref[uid]`` at t_ref."""
        span = max(1.0, t_ref - attempt.t_train0)
        attempt.seq_rate = {uid: max(0.0, (seq - 3) / span) for uid, seq in seq_at_ref.items()}

    def nominal_rates(self, attempt: Attempt) -> None:
        """Earlier attempts and healthy runs progress at the rate the hang configuration implies."""
        spec = self.spec
        t_ref = attempt.t_train0 + (spec.iterations_before_hang + 0.25 + 0.85) * spec.step_s
        self.set_rates(attempt, t_ref, {0: spec.hang_seq - 1, 2: spec.node_hang_seq - 1})

    def seq_state(self, attempt: Attempt, proc: Proc, uid: int, t: float) -> tuple[int, int]:
        """(last enqueued, last completed) of a PG on a rank at time t."""
        frozen = attempt.frozen.get((proc.rank, uid))
        if frozen and t >= frozen[0]:
            return frozen[1], frozen[2]
        enqueued = 3 + int(attempt.seq_rate.get(uid, 0.0) * max(0.0, t - attempt.t_train0))
        if t < attempt.t_train0:
            enqueued = 3 if uid == 0 else 0
        in_flight = 1 if (int(t * 7.3) + proc.rank) % 3 == 0 and t > attempt.t_train0 else 0
        if frozen:
            enqueued = min(enqueued, frozen[1])
        return enqueued, enqueued - in_flight

    # -- earlier attempts: a CUDA OOM on one rank -------------------------------------------

    def crash_with_oom(self, attempt: Attempt) -> None:
        rng, spec = self.rng, self.spec
        iterations = max(2, min(spec.iterations_before_hang - 1, 6 + 5 * attempt.index + rng.randrange(3)))
        self.nominal_rates(attempt)
        self.train(attempt, iterations)
        victims = [r for r in range(self.cluster.world) if r != spec.culprit] or [0]
        victim = attempt.procs[rng.choice(victims)]
        t_oom = attempt.iteration_ends[-1] + 0.6 * spec.step_s
        victim.err(t_oom, self.log_of(victim).traceback(megatron_oom(self.era, victim.slot.local_rank)))
        self.truth.setdefault("earlier_failures", []).append(
            {"attempt": attempt.index, "kind": "oom", "rank": victim.rank, "host": victim.slot.host})
        aborts = {victim.rank: (t_oom + jitter(rng, 0.5, 0.9), 1)}
        if spec.launcher == "torchrun-logdir":
            self.restart_after_failure(attempt, aborts)
        elif spec.launcher == "srun-per-gpu":
            self.srun_kill_on_bad_exit(attempt, aborts)
        else:
            self.oom_cascade_srun_torchrun(attempt, victim, aborts)
        attempt.end_t = max(p.exit_t or 0.0 for p in attempt.procs) + 0.5

    def oom_cascade_srun_torchrun(self, attempt: Attempt, victim: Proc, aborts: dict[int, tuple[float, int]]) -> None:
        """Without restarts, the peers of the dead rank wait in the gradient reduce-scatter until the
        watchdog fires (root cause F of the catalogue); every agent then prints its own table."""
        t_dead = aborts[victim.rank][0]
        seq = self.seq_state(attempt, victim, 0, t_dead)[0] + 1
        work = Work(seq, "_REDUCE_SCATTER_BASE", self.spec.numel_in * self.cluster.world, self.spec.numel_in,
                    self.spec.timeout_s * 1000)
        # The dead rank's node-mates are terminated by their agent long before any timeout.
        waiters = [Waiter(p, self.world_pg, p.rank, work) for p in attempt.procs if p.slot.node != victim.slot.node]
        for w in waiters:
            attempt.frozen[(w.proc.rank, 0)] = (t_dead, seq, seq - 1)
        if waiters:
            first = self.rng.choice(waiters)
            aborts.update(self.watchdog(attempt, t_dead + jitter(self.rng, 0.2, 1.5), waiters, first))
        self.settle_torchrun(attempt, aborts)

    # -- the final attempt ------------------------------------------------------------------

    def finish_healthy(self, attempt: Attempt) -> None:
        spec, rng = self.spec, self.rng
        self.nominal_rates(attempt)
        iterations = spec.iterations_before_hang + HEALTHY_EXTRA_ITERATIONS
        self.train(attempt, iterations)
        t_end = attempt.iteration_ends[-1] + 0.5
        for t, text in frameworks.save_lines(self.spec, self.clock, t_end, iterations):
            attempt.procs[0].out(t, text)
        t_exit = t_end + (43.0 if spec.checkpoint_save_s == 41.3 else spec.checkpoint_save_s + 1.7)
        for proc in attempt.procs:
            if spec.nccl_debug:
                nlog = self.nlog(proc)
                comm = self.nccl_comms[(attempt.index, proc.rank)][0]
                line = nlog.destroy_complete(proc.pid, comm)
                t_destroy = t_exit + jitter(rng, 0, 0.4)
                if line:
                    self._nccl_out(proc, t_destroy, [line])
            proc.end(t_exit + jitter(rng, 0.5, 1.5), 0)
        for log in attempt.agent_logs:
            log.finished(t_exit + jitter(rng, 1.6, 2.0))
        attempt.end_t = t_exit + 2.5
        self.truth.update(scenario="healthy", culprit_rank=None, culprit_host=None, culprit_local_rank=None,
                          culprit_bus_id=None, culprit_pid=None, op=None, hang_seq=None, pg_desc=None,
                          exit_codes={p.rank: p.exit_code for p in attempt.procs})

    def hang(self, attempt: Attempt) -> None:
        spec, rng = self.spec, self.rng
        self.train(attempt, spec.iterations_before_hang)
        t_hang = attempt.iteration_ends[-1] + 0.85 * spec.step_s
        # Progress is paced so that the hung collective is exactly the configured SeqNum.
        self.set_rates(attempt, t_hang, {0: spec.hang_seq - 1, 2: spec.node_hang_seq - 1})
        waiters, first = self.plan_hang(attempt, t_hang)
        fires = spec.timeout_s < spec.hang_duration_s
        t_cancel = t_hang + spec.hang_duration_s
        aborts: dict[int, tuple[float, int]] = {}
        if spec.scenario == "all-stuck":
            self.network_fault(attempt, t_hang)
        if fires:
            aborts = self.watchdog(attempt, t_hang, waiters, first)
            if spec.launcher == "srun-per-gpu":
                self.srun_kill_on_bad_exit(attempt, aborts)
            else:
                self.settle_torchrun(attempt, aborts)
        else:
            for w in waiters:
                w.enqueued = t_hang + w.delay + jitter(rng, 0, 0.9)
        alive = [p for p in attempt.procs if p.exit_t is None]
        if alive:
            self.cancel_job(attempt, t_cancel, torn=not fires)
        if spec.pyspy and spec.scenario in ("deadlock", "all-stuck"):
            self.take_pyspy(attempt, waiters)
        attempt.end_t = max(p.exit_t or 0.0 for p in attempt.procs) + 1.0
        self.record_truth(attempt, waiters, first if fires else None)

    def plan_hang(self, attempt: Attempt, t_hang: float) -> tuple[list[Waiter], Waiter | None]:
        """Who waits in what, who never entered, and which waiting rank will time out first."""
        spec, procs = self.spec, attempt.procs
        culprit = procs[spec.culprit] if spec.scenario != "all-stuck" else None
        node_group = spec.group == "node"
        hang_node = culprit.slot.node if culprit else self.cluster.nodes // 2
        members = [p for p in procs if p.slot.node == hang_node] if node_group else list(procs)
        pg_of = (lambda p: self.ep_pg(p.slot.node)) if node_group else (lambda p: self.world_pg)
        rank_in = (lambda p: p.slot.local_rank) if node_group else (lambda p: p.rank)
        seq = spec.node_hang_seq if node_group else spec.hang_seq
        uid = 2 if node_group else 0
        numel_out = spec.numel_out if spec.numel_out is not None else self.numel_out(spec.op, spec.numel_in, len(members))
        work = Work(seq, spec.op, spec.numel_in, numel_out, spec.timeout_s * 1000)
        waiters = []
        for proc in members:
            if proc is culprit and spec.scenario == "deadlock":
                attempt.frozen[(proc.rank, uid)] = (t_hang, seq - 1, seq - 1)
                continue
            own = self.desync_work(work, len(members)) if proc is culprit else work
            waiters.append(Waiter(proc, pg_of(proc), rank_in(proc), own))
            attempt.frozen[(proc.rank, uid)] = (t_hang, seq, seq - 1)
        if node_group:
            down = Work(spec.hang_seq, "ALLREDUCE", 1, 1, spec.timeout_s * 1000)
            for proc in procs:
                if proc.slot.node == hang_node:
                    attempt.frozen[(proc.rank, 0)] = (t_hang, spec.hang_seq - 1, spec.hang_seq - 1)
                else:
                    attempt.frozen[(proc.rank, 2)] = (t_hang, spec.node_hang_seq, spec.node_hang_seq)
                    delay = jitter(self.rng, 4.0, 7.0)
                    attempt.frozen[(proc.rank, 0)] = (t_hang + delay, spec.hang_seq, spec.hang_seq - 1)
                    waiters.append(Waiter(proc, self.world_pg, proc.rank, down, delay=delay))
        else:
            for proc in procs:
                attempt.frozen[(proc.rank, 2)] = (t_hang, *(2 * [self.seq_state(attempt, proc, 2, t_hang)[0]]))
        # The first to time out is a symptom by construction: never the culprit, always in the hung group.
        candidates = [w for w in waiters if w.proc is not culprit and w.delay == 0.0]
        first = self.rng.choice(candidates) if candidates else None
        return waiters, first

    @staticmethod
    def numel_out(op: str, numel_in: int, group: int) -> int:
        if op in ("_ALLGATHER_BASE", "ALLGATHER"):
            return numel_in * group
        if op in ("_REDUCE_SCATTER_BASE", "REDUCE_SCATTER"):
            return max(1, numel_in // group)
        return numel_in

    def desync_work(self, work: Work, group: int) -> Work:
        """The culprit's own collective at the same SeqNum: another op, or another size."""
        if self.spec.scenario == "desync-op":
            op = "BROADCAST" if work.op != "BROADCAST" else "ALLREDUCE"
            return Work(work.seq, op, work.numel_in, work.numel_in, work.timeout_ms)
        if self.spec.scenario == "desync-size":
            numel = work.numel_in + 16384
            return Work(work.seq, work.op, numel, self.numel_out(work.op, numel, group), work.timeout_ms)
        return work

    # -- the watchdog path ------------------------------------------------------------------

    def watchdog(self, attempt: Attempt, t_hang: float, waiters: list[Waiter],
                 first: Waiter | None) -> dict[int, tuple[float, int]]:
        """Timeouts, dump coordination and teardown; returns rank -> (abort time, exit code)."""
        rng, era, timeout = self.rng, self.era, self.spec.timeout_s
        if first is None:
            first = waiters[0]
        first.enqueued = t_hang + jitter(rng, 0, 0.05)
        first.detected = first.enqueued + timeout + jitter(rng, 0.004, 0.12)
        for w in waiters:
            if w is first:
                continue
            if w.delay:
                w.enqueued = t_hang + w.delay + jitter(rng, 0, 0.9)
                w.detected = w.enqueued + timeout + jitter(rng, 0.004, 0.6)
            else:
                # Close behind the first, but after the dump signal reached it (see the module notes).
                w.detected = first.detected + jitter(rng, 0.25, 0.95)
                w.enqueued = w.detected - timeout - jitter(rng, 0.004, 0.2)
        self._culprit_times_out_last(waiters, first)
        aborts = {}
        for w in waiters:
            w.ran_for_ms = int((w.detected - w.enqueued) * 1000)
            w.proc.timed_out = True
            self.detect(attempt, w, is_first=w is first)
            t_abort = w.detected + jitter(rng, *era.teardown_delay)
            log = self.log_of(w.proc)
            w.proc.err(t_abort - 0.002, *log.teardown(t_abort - 0.002, w.work, w.pg, w.pg_rank, w.ran_for_ms))
            aborts[w.proc.rank] = (t_abort, -6)
        if era.dump_signal:
            self.coordinate_dump(attempt, waiters, first)
        return aborts

    def _culprit_times_out_last(self, waiters: list[Waiter], first: Waiter) -> None:
        """A desync culprit times out too, but after the other waiting ranks of its node, so that
        neither the first timeout nor its node's "Root Cause" names it (they are symptoms)."""
        culprit = next((w for w in waiters if w.proc.rank == self.spec.culprit and w is not first
                        and self.spec.scenario.startswith("desync")), None)
        if culprit is None or culprit.delay:
            return
        peers = [w.detected for w in waiters if w is not culprit and not w.delay
                 and w.proc.slot.node == culprit.proc.slot.node]
        latest = max(peers, default=first.detected + 0.5)
        culprit.detected = min(latest + jitter(self.rng, 0.03, 0.12), first.detected + 0.99)
        culprit.enqueued = culprit.detected - self.spec.timeout_s - jitter(self.rng, 0.004, 0.05)

    def detect(self, attempt: Attempt, w: Waiter, is_first: bool) -> None:
        log, t = self.log_of(w.proc), w.detected
        lines = [log.watchdog_timeout(t, w.work, w.pg_rank, w.ran_for_ms),
                 log.pg_status(t, w.pg, w.pg_rank, w.work.seq, w.work.seq, w.work.seq - 1)]
        if w.delay:
            caller = "training-log"
        elif w.proc.rank == self.spec.culprit and self.spec.scenario == "desync-op":
            caller = "lazy-init"
        else:
            caller = "gather"
        frames = collective_frames(f"/usr/local/lib/python{self.era.python}/dist-packages", MEGATRON_ROOT,
                                   w.work.op, caller)
        lines.append(log.failed_collective_stack(t, frames))
        if is_first:
            lines.append(log.first_pg_to_signal(t, w.pg, w.pg_rank))
        w.proc.err(t, *(line for line in lines if line))

    def coordinate_dump(self, attempt: Attempt, waiters: list[Waiter], first: Waiter) -> None:
        """PG 0's monitor on every rank sees the dump flag the first detector wrote to the TCPStore."""
        rng = self.rng
        detected = {w.proc.rank: w.detected for w in waiters}
        for proc in attempt.procs:
            if proc.exit_t is not None and proc.exit_t < first.detected:
                continue
            log = self.log_of(proc)
            if proc is first.proc:
                t, source = first.detected + jitter(rng, 0.1, 0.5), None
            else:
                limit = detected.get(proc.rank, first.detected + 1.0) - first.detected - 0.02
                t, source = first.detected + jitter(rng, 0.02, max(0.03, min(0.98, limit))), first.proc.rank
            enqueued, completed = self.seq_state(attempt, proc, 0, t)
            lines = [] if source is None else [log.observed_dump_signal(t, self.world_pg)]
            lines += [log.received_dump_signal(t, self.world_pg, source, enqueued, completed),
                      log.preparing_dump(t + 0.0002, self.world_pg)]
            proc.err(t, *(line for line in lines if line))

    def network_fault(self, attempt: Attempt, t_hang: float) -> None:
        """All-stuck: RoCE retry timeouts on one node's NICs while everyone waits."""
        if not self.spec.nccl_debug or not getattr(self.spec, "network_fault", True):
            return
        if self.spec.node_fault == "link-flap":     # one NIC port flaps: both sides of its pairs (fabric_faults)
            from .fabric_faults import link_flap_warns
            return link_flap_warns(self, attempt, t_hang)
        rng = self.rng
        node = self.cluster.nodes // 2
        peer = (node + 1) % self.cluster.nodes
        self.truth["fault_host"] = self.cluster.hosts[node]
        for slot in self.cluster.node_slots(node)[:3]:
            proc = attempt.procs[slot.rank]
            nlog = self.nlog(proc)
            t = t_hang + jitter(rng, 15, 40)
            local_gid = f"10.30.{slot.local_rank}.{11 + node}"
            remote_gid = f"10.30.{slot.local_rank}.{11 + peer}"
            warn = nlog.network_error(proc.tids["proxy"], self.cluster.slots[peer * self.cluster.gpus_per_node].ip,
                                      rng.randrange(32768, 61000), local_gid, remote_gid, self.clock.megatron(t))
            if warn:
                self._nccl_out(proc, t, [warn])

    # -- INFO-level progress and NCCL service-thread chatter ---------------------------------

    def emit_work_updates(self, attempt: Attempt) -> None:
        if not (self.spec.work_updates and self.era.work_updates):
            return
        horizon = attempt.end_t or max(p.exit_t or 0.0 for p in attempt.procs)
        for proc in attempt.procs:
            log = self.log_of(proc)
            t = attempt.t_pg_init[proc.rank] + jitter(self.rng, 0.5, 59.0)
            while t < horizon and proc.alive_at(t):
                for uid, pg, pg_rank in ((0, self.world_pg, proc.rank),
                                         (2, self.ep_pg(proc.slot.node), proc.slot.local_rank)):
                    enqueued, completed = self.seq_state(attempt, proc, uid, t)
                    proc.err(t, log.work_update(t, pg, pg_rank, enqueued, completed))
                t += 60.0 + jitter(self.rng, 0, 0.02)

    def emit_service_thread_closures(self, attempt: Attempt) -> None:
        """Each death is noticed by the NCCL proxy service thread of the other ranks of the node."""
        if not self.spec.nccl_debug:
            return
        for dead in attempt.procs:
            if dead.exit_t is None or dead.exit_code == 0:
                continue
            for proc in attempt.node_procs(dead.slot.node):
                if proc is dead:
                    continue
                t = dead.exit_t + jitter(self.rng, 0.001, 0.05)
                line = self.nlog(proc).service_thread_closed(proc.tids["proxy"], dead.slot.local_rank)
                if proc.alive_at(t) and line:
                    self._nccl_out(proc, t, [line])

    # -- py-spy, env, truth ---------------------------------------------------------------------

    def take_pyspy(self, attempt: Attempt, waiters: list[Waiter]) -> None:
        waiting = {w.proc.rank: w for w in waiters}
        for proc in attempt.procs:
            w = waiting.get(proc.rank)
            if w is None:
                state, frames = "active+gil", CULPRIT_MAIN
            elif w.delay:
                state, frames = "active", DOWNSTREAM_MAIN
            else:
                state, frames = "active", WAITING_MAIN
            threads = {"pin_memory": proc.tids["pin_memory"], "watchdog": proc.tids["pywatchdog"]}
            self.pyspy[(proc.slot.host, proc.pid)] = dump(self.era, proc.pid, COMMAND, state, frames, threads)

    def env_dumps(self) -> dict[str, str]:
        return {host: env_dump(self.spec, self.cluster, self.era, node) for node, host in enumerate(self.cluster.hosts)}

    def record_truth(self, attempt: Attempt, waiters: list[Waiter], first: Waiter | None) -> None:
        spec = self.spec
        culprit = attempt.procs[spec.culprit] if spec.scenario != "all-stuck" else None
        node_group = spec.group == "node"
        self.truth.update(
            scenario=spec.scenario,
            culprit_rank=culprit.rank if culprit else None,
            culprit_host=culprit.slot.host if culprit else None,
            culprit_local_rank=culprit.slot.local_rank if culprit else None,
            culprit_bus_id=culprit.slot.bus_id if culprit else None,
            culprit_pid=culprit.pid if culprit else None,
            op=spec.op,
            hang_seq=spec.node_hang_seq if node_group else spec.hang_seq,
            pg_desc="EXPERT_MODEL_PARALLEL_GROUP" if node_group else "default_pg",
            pg_id=2 if node_group else 0,
            default_pg_seq=spec.hang_seq,
            watchdog_fired=first is not None,
            first_detector=first.proc.rank if first else None,
            timed_out_ranks=sorted(p.rank for p in attempt.procs if p.timed_out and _printed_timeout(p)),
            exit_codes={p.rank: p.exit_code for p in attempt.procs},
        )


def _printed_timeout(proc: Proc) -> bool:
    return any("Watchdog caught collective operation timeout" in line.text for line in proc.lines)


def _random_suffix(rng: random.Random) -> str:
    """``tempfile.mkdtemp`` style: 8 characters of [a-z0-9_]."""
    alphabet = "abcdefghijklmnopqrstuvwxyz0123456789_"
    return "".join(rng.choice(alphabet) for _ in range(8))
