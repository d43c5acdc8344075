"""Where the lines of a run land on disk, per launcher.

* ``torchrun-logdir``: ``torchrun --log-dir /logs --redirects 3`` on each node, started by
  ``srun --label --ntasks-per-node=1``. Worker output goes to per-rank files without any prefix::

      OUT/logs/<host>/<run_id>_<rand>/attempt_<n>/<local_rank>/stdout.log   (NCCL INFO, Megatron)
      OUT/logs/<host>/<run_id>_<rand>/attempt_<n>/<local_rank>/stderr.log   (c10d, tracebacks, NCCL WARN*)

  and the agents' own output to ``OUT/slurm-4242.out`` with srun labels ``0:`` .. ``4:``.
  (*NCCL writes WARN lines to stdout too; they stay in stdout.log.)
* ``srun-per-gpu``: one task per GPU; every line of every rank in ``OUT/slurm-4242.out`` behind
  the srun label of its global rank, right-aligned to the widest label (`` 3: ``, ``39: ``).
* ``srun-torchrun``: ``srun --label --ntasks-per-node=1 torchrun --tee 3``: worker lines as
  `` <node>: [default<local_rank>]:<line>``, agent lines as `` <node>: <line>``.

Lines from different processes are interleaved by time (stable for equal times). Slurm's own
lines (``srun: error:``, ``slurmstepd:``) carry no label.
"""

from __future__ import annotations

import json
from pathlib import Path

from .base import Line
from .story import Run

LOG_DIR = "logs"


def write_run(run: Run, out: Path, launcher: str, truth: bool) -> None:
    out.mkdir(parents=True, exist_ok=True)
    slurm_out = out / f"slurm-{run.cluster.job_id}.out"
    if launcher == "torchrun-logdir":
        _write_rank_files(run, out)
        _write_combined(slurm_out, _agent_lines(run) + _job_lines(run))
    elif launcher == "srun-per-gpu":
        width = len(str(run.cluster.world - 1))
        rank_lines = [(line, _label(proc.rank, width)) for a in run.attempts for proc in a.procs for line in proc.lines]
        _write_combined(slurm_out, rank_lines + _job_lines(run))
    elif launcher == "srun-torchrun":
        width = len(str(run.cluster.nodes - 1))
        rank_lines = [(line, f"{_label(proc.slot.node, width)}[default{proc.slot.local_rank}]:")
                      for a in run.attempts for proc in a.procs for line in proc.lines]
        _write_combined(slurm_out, rank_lines + _agent_lines(run) + _job_lines(run))
    else:
        raise ValueError(f"unknown launcher {launcher!r}")
    _write_side_files(run, out)
    if truth:
        (out / ".truth.json").write_text(json.dumps(run.truth, indent=2, sort_keys=True) + "\n")


def _label(task: int, width: int) -> str:
    """``srun --label``: the task id right-aligned to the widest id, then ``: ``."""
    return f"{task:>{width}}: "


def _agent_lines(run: Run) -> list[tuple[Line, str]]:
    width = len(str(run.cluster.nodes - 1))
    return [(line, _label(agent.node, width)) for a in run.attempts for agent in a.agents for line in agent.lines]


def _job_lines(run: Run) -> list[tuple[Line, str]]:
    return [(line, "") for line in run.job_lines]


def _write_combined(path: Path, labelled: list[tuple[Line, str]]) -> None:
    labelled.sort(key=lambda item: (item[0].t, item[0].order))
    path.write_text("".join(f"{prefix}{line.text}\n" if not getattr(line, "multiline", False)
                            else prefix + line.text.replace("\n", "\n" + prefix) + "\n"   # coll_trace blocks
                            for line, prefix in labelled))


def _write_rank_files(run: Run, out: Path) -> None:
    for attempt in run.attempts:
        for proc in attempt.procs:
            folder = (out / LOG_DIR / proc.slot.host / run.run_dirs[proc.slot.node]
                      / f"attempt_{attempt.index}" / str(proc.slot.local_rank))
            folder.mkdir(parents=True, exist_ok=True)
            for stream, name in (("out", "stdout.log"), ("err", "stderr.log")):
                lines = sorted((line for line in proc.lines if line.stream == stream), key=lambda l: (l.t, l.order))
                text = "".join(line.text + "\n" for line in lines)
                if run.torn == (attempt.index, proc.rank, stream) and lines:
                    text = _tear_last_line(text)
                (folder / name).write_text(text)


def _tear_last_line(text: str) -> str:
    """The process was killed while its last line was half written: cut it, with no newline."""
    body, _, last = text.rstrip("\n").rpartition("\n")
    cut = last[: max(1, len(last) // 2)]
    return f"{body}\n{cut}" if body else cut


def _write_side_files(run: Run, out: Path) -> None:
    for host, text in run.env.items():
        (out / "env").mkdir(exist_ok=True)
        (out / "env" / f"{host}.env").write_text(text)
    for (host, pid), text in sorted(run.pyspy.items()):
        folder = out / "pyspy" / host
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"py-spy-{pid}.txt").write_text(text)
