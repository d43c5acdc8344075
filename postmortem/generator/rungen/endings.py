"""How the worker processes end, per launcher.

* torchrun (``torchrun-logdir``, ``srun-torchrun``): each node's agent polls its workers every
  ``--monitor-interval``; at the first poll that finds a dead worker it records every worker that
  has *already* exited with a non-zero code, SIGTERMs the others ("Sending process P closing signal
  SIGTERM"), logs "failed (exitcode ...)" and raises ChildFailedError -- or restarts the group
  when ``--max-restarts`` allows. Workers it terminated itself are not in its table
  (``SubprocessContext._poll``), so the culprit of a deadlock shows up only as a SIGTERM target.
* ``srun-per-gpu`` (``--kill-on-bad-exit=1``): the first task that fails takes the step down.
* A job nobody's watchdog ended is cancelled by Slurm, which SIGTERMs every process of the step.

The ``crash`` scenario (``RunSpec.crash_end``) ends the last attempt with one rank's failure:
``host-oom-kill`` / ``cgroup-oom-kill`` (the kernel OOM killer SIGKILLs the rank's process: no
traceback, exit -9, ``oom-kill`` lines in the node's kernel log, written by ``node_logs``), or a
Python exception on that rank (``oom``: CUDA OOM; ``cuda-ecc``, ``illegal-address``,
``device-assert``, ``gloo-closed``: ``c10d.crash_text``), exit 1. The cascade is the one of a
real job: the agent of the failed node SIGTERMs its other workers; the ranks of the other nodes
wait in the next collective until their watchdog fires (SIGABRT) and their own agents end.
"""

from __future__ import annotations

from .base import Line, Proc, jitter, next_order
from .elastic import AgentLog, Failure, first_failure, job_cancelled, srun_task_error, step_cancelled
from .run import Attempt

CRASH_ENDS = ("host-oom-kill", "cgroup-oom-kill", "oom", "cuda-ecc", "illegal-address", "device-assert",
              "gloo-closed")
KILL_ENDS = ("host-oom-kill", "cgroup-oom-kill")


class Endings:
    """Mixed into ``Story``: uses its ``spec``, ``cluster``, ``era``, ``clock``, ``rng`` and ``job()``."""

    def settle_torchrun(self, attempt: Attempt, aborts: dict[int, tuple[float, int]]) -> None:
        """Each node's agent: table of the workers already dead at its poll, SIGTERM for the rest."""
        for node, log in enumerate(attempt.agent_logs):
            ended = self._agent_poll(attempt, node, aborts)
            if ended is None:
                continue
            t_done, failures = ended
            log.failed(t_done, first_failure(failures))
            log.child_failed_error(t_done + 0.001, failures)
            attempt.agent_exit[node] = t_done + 0.05
            self.job(t_done + 0.08, srun_task_error(self.cluster.hosts[node], [node], 1))

    def restart_after_failure(self, attempt: Attempt, aborts: dict[int, tuple[float, int]]) -> None:
        """torchrun --max-restarts: the failing node restarts its group, the others follow."""
        failed_nodes = set()
        for node, log in enumerate(attempt.agent_logs):
            ended = self._agent_poll(attempt, node, aborts)
            if ended is None:
                continue
            t_done, failures = ended
            failed_nodes.add(node)
            log.failed(t_done, first_failure(failures))
            log.will_restart(t_done + 0.002, self.spec.attempts - 1 - attempt.index, self.max_restarts)
        t_first = min(aborts.values())[0]
        for node, log in enumerate(attempt.agent_logs):
            if node in failed_nodes:
                continue
            t = t_first + jitter(self.rng, 1.0, 4.5)
            log.new_nodes_detected(t, min(failed_nodes))
            self._terminate_node(attempt, node, t + 0.01, log)

    def _agent_poll(self, attempt: Attempt, node: int, aborts: dict[int, tuple[float, int]]):
        procs = attempt.node_procs(node)
        mine = {p.rank: aborts[p.rank] for p in procs if p.rank in aborts}
        if not mine:
            return None
        interval = self.era.monitor_interval_s
        t_first = min(t for t, _ in mine.values())
        phase = (attempt.t0 * 1.7 + node * 0.37) % interval
        t_poll = t_first + (phase - (t_first - attempt.t0)) % interval + 0.001
        t_poll = self._poll_before_desync_culprit(procs, mine, t_poll)
        failures = []
        for proc in procs:
            t_abort, code = mine.get(proc.rank, (None, None))
            if t_abort is not None and t_abort <= t_poll:
                proc.end(t_abort, code)
                # ProcessFailure stamps the poll time (int seconds), not the moment the child died.
                failures.append(Failure(t_poll, f"{proc.slot.host}.cluster.internal", proc.rank,
                                        proc.slot.local_rank, code, proc.pid))
        t_done = self._terminate_node(attempt, node, t_poll, attempt.agent_logs[node])
        return t_done, failures

    def _poll_before_desync_culprit(self, procs: list[Proc], mine: dict[int, tuple[float, int]], t_poll: float) -> float:
        """The table's root cause is the lowest local rank among the failures of one poll; when that
        would be a desync culprit, let the agent's poll come just before the culprit's abort."""
        if not self.spec.scenario.startswith("desync") or self.spec.culprit not in mine:
            return t_poll
        culprit_abort = mine[self.spec.culprit][0]
        caught = [p for p in procs if p.rank in mine and mine[p.rank][0] <= t_poll]
        if caught and min(caught, key=lambda p: p.slot.local_rank).rank == self.spec.culprit:
            earlier = [t for rank, (t, _) in mine.items() if rank != self.spec.culprit and t < culprit_abort]
            if earlier:
                return (max(earlier) + culprit_abort) / 2
        return t_poll

    def _terminate_node(self, attempt: Attempt, node: int, t: float, log: AgentLog) -> float:
        """The agent's close(): SIGTERM to every worker still running; returns when all are gone."""
        last = t
        for i, proc in enumerate(attempt.node_procs(node)):
            if proc.exit_t is not None and proc.exit_t <= t:
                continue
            log.sending_sigterm(t + 0.0004 * i, proc.pid)
            t_dead = t + jitter(self.rng, 0.005, 0.08)
            proc.end(t_dead, -15)
            last = max(last, proc.exit_t)
        return last + 0.01

    def srun_kill_on_bad_exit(self, attempt: Attempt, aborts: dict[int, tuple[float, int]]) -> None:
        """srun --kill-on-bad-exit=1: the first failed task takes the whole step down."""
        rank, (t_first, code) = min(aborts.items(), key=lambda kv: kv[1][0])
        first = attempt.procs[rank]
        self.job(t_first + 0.03, srun_task_error(first.slot.host, [rank], code))
        self.job(t_first + 0.04, f"srun: Terminating StepId={self.cluster.job_id}.0")
        t_kill = t_first + 0.05
        self.job(t_kill, step_cancelled(self.clock, t_kill, self.cluster.job_id, self.cluster.hosts[0]))
        for proc in attempt.procs:
            t_abort, own_code = aborts.get(proc.rank, (None, None))
            if t_abort is not None and t_abort <= t_kill:
                proc.end(t_abort, own_code)
            else:
                proc.end(t_kill + jitter(self.rng, 0.005, 0.08), -15)
        self._srun_summary(attempt, t_kill + 0.5, skip={rank})
        self.job(t_kill + 0.55, f"srun: Force Terminated StepId={self.cluster.job_id}.0")

    def _srun_summary(self, attempt: Attempt, t: float, skip: set[int]) -> None:
        """One ``srun: error:`` line per node and exit status, as srun groups them."""
        for node in range(self.cluster.nodes):
            by_code: dict[int, list[int]] = {}
            for proc in attempt.node_procs(node):
                if proc.rank not in skip and proc.exit_code:
                    by_code.setdefault(proc.exit_code, []).append(proc.rank)
            for code, ranks in sorted(by_code.items()):
                self.job(t + 0.001 * node, srun_task_error(self.cluster.hosts[node], ranks, code))

    def cancel_job(self, attempt: Attempt, t: float, torn: bool) -> None:
        """scancel after hours of silence: Slurm SIGTERMs every process of the step."""
        self.job(t, job_cancelled(self.clock, t, self.cluster.job_id, self.cluster.hosts[0]))
        self.job(t + 0.002, "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.")
        if self.torchrun:
            for node, log in enumerate(attempt.agent_logs):
                if node in attempt.agent_exit:
                    continue
                log.death_signal(t + 0.003)
                self._terminate_node(attempt, node, t + 0.004, log)
                log.signal_exception(t + 0.45)
        for proc in attempt.procs:
            proc.end(t + jitter(self.rng, 0.003, 0.3), -15)
        if torn and self.spec.launcher == "torchrun-logdir":
            self.torn = (attempt.index, attempt.procs[-1].rank, "out")

    # -- the crash scenario ------------------------------------------------------------------

    def crash_end(self, attempt: Attempt) -> None:
        """The last attempt: rank ``spec.culprit`` fails mid-training (``spec.crash_end``)."""
        from .c10d import crash_text
        from .megatron import megatron_oom

        spec, rng = self.spec, self.rng
        self.nominal_rates(attempt)
        self.train(attempt, spec.iterations_before_hang)
        victim = attempt.procs[spec.culprit]
        t_fail = attempt.iteration_ends[-1] + 0.6 * spec.step_s
        if spec.crash_end in KILL_ENDS:
            t_dead, code = t_fail + jitter(rng, 0.01, 0.05), -9
        else:
            text = megatron_oom(self.era, victim.slot.local_rank, getattr(spec, "oom_site", "backward"))
            log = self.log_of(victim)
            before, after = [], []
            if spec.crash_end != "oom":
                before, exception, after = crash_text(spec.crash_end, spec.torch_era)
                text = text.rsplit("\n", 1)[0] + "\n" + exception
            for b in before:   # device printf: no prefix, just before the traceback
                victim.lines.append(Line(t_fail - 0.001, next_order(), "err", b))
            victim.err(t_fail, log.traceback("\n".join([text, *after])))
            t_dead, code = t_fail + jitter(rng, 0.5, 0.9), 1
        aborts = {victim.rank: (t_dead, code)}
        if spec.launcher == "srun-per-gpu":
            self.srun_kill_on_bad_exit(attempt, aborts)
        else:
            self.oom_cascade_srun_torchrun(attempt, victim, aborts)
        attempt.end_t = max(p.exit_t or 0.0 for p in attempt.procs) + 1.0
        timed_out = sorted(p.rank for p in attempt.procs if p.timed_out)
        self.truth.update(
            scenario="crash", crash_end=spec.crash_end, culprit_rank=victim.rank, culprit_host=victim.slot.host,
            culprit_local_rank=victim.slot.local_rank, culprit_bus_id=victim.slot.bus_id, culprit_pid=victim.pid,
            t_fail_utc=f"{self.clock_of(victim.slot.node).at(t_fail):%Y-%m-%dT%H:%M:%S.%f}",
            t_dead=t_dead, watchdog_fired=bool(timed_out), timed_out_ranks=timed_out,
            exit_codes={p.rank: p.exit_code for p in attempt.procs},
            slurm_state=("FAILED", "0:9" if spec.launcher == "srun-per-gpu" and code == -9 else "1:0"))


def oom_kill_events(run, node: int) -> list[tuple[float, str]]:
    """The kernel's OOM-killer lines for the crash scenario's killed rank, on its node (job time);
    none for other nodes or endings. Called by ``node_logs.write_node_logs``."""
    truth = run.truth
    if truth.get("scenario") != "crash" or truth.get("crash_end") not in KILL_ENDS:
        return []
    victim = next(p for p in run.attempts[-1].procs if p.rank == truth["culprit_rank"])
    if victim.slot.node != node:
        return []
    t, pid, job = truth["t_dead"] - 0.004, victim.pid, run.cluster.job_id
    memcg = f"/slurm/uid_1000/job_{job}"
    if truth["crash_end"] == "cgroup-oom-kill":
        invoked = "python invoked oom-killer: gfp_mask=0xcc0(GFP_KERNEL), order=0, oom_score_adj=0"
        constraint = (f"oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0-1,"
                      f"oom_memcg={memcg},task_memcg={memcg}/step_0/task_{victim.slot.local_rank},task=python,"
                      f"pid={pid},uid=1000")
        killed = "Memory cgroup out of memory: Killed process"
    else:
        invoked = ("pt_data_worker invoked oom-killer: gfp_mask=0x140cca(GFP_HIGHUSER_MOVABLE|__GFP_COMP), order=0, "
                   "oom_score_adj=0")
        constraint = (f"oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0-1,global_oom,"
                      f"task_memcg={memcg}/step_0/task_{victim.slot.local_rank},task=python,pid={pid},uid=1000")
        killed = "Out of memory: Killed process"
    return [
        (t, invoked),
        (t + 0.000110, constraint),
        (t + 0.000140, f"{killed} {pid} (python) total-vm:412983264kB, anon-rss:251803392kB, file-rss:1048576kB, "
                       "shmem-rss:8388608kB, UID:1000 pgtables:498112kB oom_score_adj:0"),
        (t + 0.512000, f"oom_reaper: reaped process {pid} (python), now anon-rss:0kB, file-rss:1048576kB, "
                       "shmem-rss:8388608kB"),
    ]
