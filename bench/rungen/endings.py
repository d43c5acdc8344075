"""How the worker processes end, per launcher.

* torchrun (``torchrun-logdir``, ``srun-torchrun``): each node's agent polls its workers every
  ``--monitor-interval``; at the first poll that finds a dead worker it records every worker that
  has *already* exited with a non-zero code, SIGTERMs the others ("Sending process P closing signal
  SIGTERM"), logs "failed (exitcode ...)" and raises ChildFailedError -- or restarts the group
  when ``--max-restarts`` allows. Workers it terminated itself are not in its table
  (``SubprocessContext._poll``), so the culprit of a deadlock shows up only as a SIGTERM target.
* ``srun-per-gpu`` (``--kill-on-bad-exit=1``): the first task that fails takes the step down.
* A job nobody's watchdog ended is cancelled by Slurm, which SIGTERMs every process of the step.
"""

from __future__ import annotations

from .base import Proc, jitter
from .elastic import AgentLog, Failure, first_failure, job_cancelled, srun_task_error, step_cancelled
from .run import Attempt


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
