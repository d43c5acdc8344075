"""The "missing node" story: one node of the allocation never starts its torchrun agent.

Slurm allocates every node and ``srun --label --ntasks-per-node=1 torchrun ...`` starts one
agent per node. On the missing node the agent never runs (a container that failed to start, a
dead prolog, an image pull that hangs): it writes nothing at all. The other agents print their
launch configs, wait in the c10d rendezvous for ``rdzv_configs {'timeout': 900}`` seconds, and
each ends with ``RendezvousTimeoutError`` (``docs/formats/pytorch-failures.md`` 7.2; the traceback is
the one a real torchrun 2.x prints, ``tests/corpus/world``). No worker is ever spawned, so there
is no per-rank log and no ``logs/`` folder: only the agents' lines in ``slurm-<job>.out`` and
the scheduler's records (``slurm/sacct.txt``, ``slurm/scontrol-show-job.txt``) that list every
node, the missing one included.
"""

from __future__ import annotations

from pathlib import Path

from .base import Agent, Clock, Cluster, reset_order
from .elastic import AgentLog, srun_task_error
from .eras import Era

RDZV_TIMEOUT_S = 900


def _rendezvous_timeout(log: AgentLog, t: float) -> None:
    torch = f"{log._site_packages}/torch"
    frames = log._launcher_frames() + [
        (f"{torch}/distributed/launcher/api.py", 260, "launch_agent", "result = agent.run()",
         "             ^^^^^^^^^^^"),
        (f"{torch}/distributed/elastic/metrics/api.py", 137, "wrapper", "result = f(*args, **kwargs)",
         "             ^^^^^^^^^^^^^^^^^^"),
        (f"{torch}/distributed/elastic/agent/server/api.py", 711, "run", "result = self._invoke_run(role)",
         "             ^^^^^^^^^^^^^^^^^^^^^^"),
        (f"{torch}/distributed/elastic/agent/server/api.py", 864, "_invoke_run",
         "self._initialize_workers(self._worker_group)", ""),
        (f"{torch}/distributed/elastic/metrics/api.py", 137, "wrapper", "result = f(*args, **kwargs)",
         "             ^^^^^^^^^^^^^^^^^^"),
        (f"{torch}/distributed/elastic/agent/server/api.py", 683, "_initialize_workers",
         "self._rendezvous(worker_group)", ""),
        (f"{torch}/distributed/elastic/metrics/api.py", 137, "wrapper", "result = f(*args, **kwargs)",
         "             ^^^^^^^^^^^^^^^^^^"),
        (f"{torch}/distributed/elastic/agent/server/api.py", 543, "_rendezvous",
         "rdzv_info = spec.rdzv_handler.next_rendezvous()", "                ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"),
        (f"{torch}/distributed/elastic/rendezvous/dynamic_rendezvous.py", 1125, "next_rendezvous",
         "self._op_executor.run(join_op, deadline, self._get_deadline)", ""),
        (f"{torch}/distributed/elastic/rendezvous/dynamic_rendezvous.py", 648, "run",
         "raise RendezvousTimeoutError", ""),
    ]
    log.agent.log(t, "Traceback (most recent call last):", *log._frames(frames),
                  "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError")


def write_missing_node(out: Path, spec, cluster: Cluster, era: Era, clock: Clock, rng) -> dict:
    """Write the run folder; returns the ground truth."""
    reset_order()
    missing = spec.missing_node
    host_missing = cluster.hosts[missing]
    labelled: list[tuple[float, int, str]] = []
    banner = (f"Job {cluster.job_id} on {cluster.nodelist()}: {cluster.world} ranks, "
              f"MASTER_ADDR={cluster.hosts[0]} MASTER_PORT=29500")
    labelled.append((-0.5, 0, banner))
    t_end = 0.0
    width = len(str(cluster.nodes - 1))
    for node in range(cluster.nodes):
        if node == missing:
            continue
        agent = Agent(node, cluster.hosts[node], rng.randrange(30_000, 3_900_000))
        log = AgentLog(era, clock, agent, rng.randrange(1 << 46, 1 << 47))
        t = 0.6 + 0.013 * node + rng.uniform(0.0, 0.4)
        log.launch_configs(t, cluster.nodes, cluster.gpus_per_node, str(cluster.job_id), f"{cluster.hosts[0]}:29400",
                           0, "/logs")
        log.omp_banner(t + 0.4)
        t_fail = t + RDZV_TIMEOUT_S + rng.uniform(0.05, 0.6)
        _rendezvous_timeout(log, t_fail)
        t_end = max(t_end, t_fail)
        label = f"{node:>{width}}: "
        labelled += [(line.t, line.order, label + line.text) for line in agent.lines]
        labelled.append((t_fail + 0.3, 10**9 + node, srun_task_error(cluster.hosts[node], [node], 1)))
    labelled.sort(key=lambda item: (item[0], item[1]))
    out.mkdir(parents=True, exist_ok=True)
    (out / f"slurm-{cluster.job_id}.out").write_text("".join(text + "\n" for _, _, text in labelled))
    _slurm_records(out, cluster, clock, t_end + 1.5)
    return {"scenario": "missing-node", "missing_node": host_missing, "missing_node_index": missing,
            "world_size": cluster.world, "hosts": list(cluster.hosts), "last_stage": "scheduled",
            "culprit_rank": None, "culprit_host": host_missing, "attempts": 1, "analysed_attempt": 0}


def _slurm_records(out: Path, cluster: Cluster, clock: Clock, t_end: float) -> None:
    """sacct and scontrol as Slurm keeps them: every allocated node, the missing one too."""
    jid, state, exit_code = cluster.job_id, "FAILED", "1:0"
    start, end = clock.slurm(-1.0), clock.slurm(t_end)
    elapsed = int(t_end + 1.0)
    el = f"{elapsed // 3600:02d}:{elapsed % 3600 // 60:02d}:{elapsed % 60:02d}"
    folder = out / "slurm"
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["JobID|JobName|Partition|State|ExitCode|Start|End|Elapsed|NNodes|NTasks|NodeList",
            f"{jid}|pretrain|gpu|{state}|{exit_code}|{start}|{end}|{el}|{cluster.nodes}|{cluster.world}|"
            f"{cluster.nodelist()}",
            f"{jid}.batch|batch||{state}|{exit_code}|{start}|{end}|{el}|1|1|{cluster.hosts[0]}",
            f"{jid}.0|torchrun||{state}|{exit_code}|{start}|{end}|{el}|{cluster.nodes}|{cluster.nodes}|"
            f"{cluster.nodelist()}"]
    (folder / "sacct.txt").write_text("\n".join(rows) + "\n")
    sc = [f"JobId={jid} JobName=pretrain",
          "   UserId=alice(1000) GroupId=alice(1000) MCS_label=N/A",
          f"   JobState={state} Reason=NonZeroExitCode Dependency=(null)",
          f"   Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode={exit_code}",
          f"   RunTime={el} TimeLimit=1-00:00:00 TimeMin=N/A",
          f"   StartTime={start} EndTime={end}",
          "   Partition=gpu AllocNode:Sid=login-01:12345",
          f"   NodeList={cluster.nodelist()}",
          f"   BatchHost={cluster.hosts[0]}",
          f"   NumNodes={cluster.nodes} NumCPUs={cluster.nodes * 128} NumTasks={cluster.nodes} CPUs/Task=128",
          f"   TRES=cpu={cluster.nodes * 128},node={cluster.nodes},gres/gpu={cluster.world}",
          "   Command=/home/alice/pretrain.sbatch",
          f"   StdOut=/home/alice/slurm-{jid}.out"]
    (folder / "scontrol-show-job.txt").write_text("\n".join(sc) + "\n")
