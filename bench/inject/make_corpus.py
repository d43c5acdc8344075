"""Regenerate the real failure-injection corpus: real torchrun jobs on this machine's CPU.

Each case runs ``bench/inject/job.py`` under ``torchrun`` (gloo backend, 4 processes) with
one injected fault and keeps what an operator would have after the job died:

  console.log        torchrun's console (workers tee'd with a ``[<role><rank>|<local>]:``
                     prefix via TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, agent lines, the
                     ChildFailedError summary)
  logs/...           the ``--log-dir`` tree (attempt_0/<local_rank>/stdout.log, stderr.log)
  pyspy/<pid>.txt    ``py-spy dump`` of every worker, taken while a hung job waits
                     (hang cases only, when py-spy can attach)
  CASE.json          what was injected: fault, rank, step, timeout, world size

Usage (needs a Python with torch; the analyzer itself never imports torch)::

    python bench/inject/make_corpus.py --python /path/to/venv/bin/python [--out tests/corpus] [CASE ...]

Cases: skip (the culprit never enters the collective), sleep (it enters long after the
others timed out), kill (SIGKILL), raise (an exception), world (a rendezvous with the wrong
world size: one process short of --nnodes' min).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

JOB = Path(__file__).with_name("job.py")
CASES = {
    "skip": {"fault": "skip", "rank": 2, "step": 3, "hang": True},
    "sleep": {"fault": "sleep", "rank": 1, "step": 4, "hang": True},
    "kill": {"fault": "kill", "rank": 3, "step": 2, "hang": False},
    "raise": {"fault": "raise", "rank": 0, "step": 3, "hang": False},
    "world": {"fault": "none", "rank": None, "step": None, "hang": False},
}
WORLD = 4
TIMEOUT_S = 6


def _torchrun(python: str) -> list[str]:
    return [python, "-m", "torch.distributed.run"]


def run_case(name: str, python: str, out: Path) -> None:
    spec = CASES[name]
    case_dir = out / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    env = dict(os.environ, PM_FAULT=spec["fault"], PM_FAULT_RANK=str(spec["rank"] or 0),
               PM_FAULT_STEP=str(spec["step"] or 0), PM_TIMEOUT_S=str(TIMEOUT_S), PM_STEPS="6",
               TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="[${role_name}${rank}|${local_rank}]:",
               OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    args = _torchrun(python) + ["--nproc-per-node", str(WORLD), "--log-dir", str(case_dir / "logs"),
                                "--redirects", "3", "--tee", "3", "--master-port", str(29500 + len(name))]
    if name == "world":
        # Two agents are expected (--nnodes 2) but only one joins: the rendezvous times out.
        args += ["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:29611",
                 "--rdzv-conf", "join_timeout=8"]
    args.append(str(JOB))
    with open(case_dir / "console.log", "wb") as console:
        proc = subprocess.Popen(args, stdout=console, stderr=subprocess.STDOUT, env=env, cwd=case_dir)
        if spec["hang"]:
            # Dump once every rank has finished the step before the fault and the hang began.
            _wait_for(case_dir / "console.log", f"iteration {spec['step'] - 1:8d}/", WORLD, proc)
            time.sleep(TIMEOUT_S * 0.4)
            _pyspy(proc.pid, case_dir / "pyspy", python)
        try:
            code = proc.wait(timeout=180)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    record = {"case": name, "fault": spec["fault"], "culprit_rank": spec["rank"], "fault_step": spec["step"],
              "timeout_s": TIMEOUT_S, "world_size": WORLD, "hang": spec["hang"], "torchrun_exit": code}
    (case_dir / "CASE.json").write_text(json.dumps(record, indent=2) + "\n")


def _wait_for(path: Path, text: str, count: int, proc: subprocess.Popen, limit_s: float = 120) -> None:
    end = time.time() + limit_s
    while time.time() < end and proc.poll() is None:
        if path.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.2)


def _pyspy(torchrun_pid: int, folder: Path, python: str) -> None:
    """``py-spy dump`` each worker (the children of the torchrun agent)."""
    pyspy = shutil.which("py-spy") or str(Path(python).with_name("py-spy"))
    if not Path(pyspy).exists():
        return
    folder.mkdir(exist_ok=True)
    for pid in _children(torchrun_pid):
        result = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
        if result.returncode == 0 and result.stdout.strip():
            (folder / f"{pid}.txt").write_text(result.stdout)


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="*", metavar="CASE", help=f"any of {', '.join(CASES)} (default: all)")
    p.add_argument("--python", default=sys.executable, help="a Python interpreter with torch installed")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "tests" / "corpus"))
    args = p.parse_args(argv)
    out = Path(args.out)
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    for name in args.cases or list(CASES):
        print(f"running {name} ...", file=sys.stderr, flush=True)
        run_case(name, args.python, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
