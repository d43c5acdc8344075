"""Regenerate the real failure-injection corpus: real torchrun jobs on this machine's CPU.

Each case runs ``bench/inject/job.py`` under ``torchrun`` (gloo backend, 2-8 processes) with at
most one injected fault (see job.py's FAULTS) and one launcher variation, and keeps what an
operator would have after the job ended:

  console.log        torchrun's console: agent lines, the ChildFailedError summary and, with
                     ``--tee``, the workers' lines (prefixed ``[default<rank>]:``, or by
                     TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE in the cases that set it)
  logs/...           the ``--log-dir`` tree (<run_id>/attempt_<n>/<local_rank>/stdout.log, stderr.log)
  pyspy/<pid>.txt    ``py-spy dump`` of every worker, taken while a hung job waits (cases with pyspy)
  node-a/, node-b/   two-node cases: each agent's console.log, logs/ and pyspy/; ``localhost`` and
                     this machine's host name are rewritten to the node's fake host name
  CASE.json          what was injected and how it was launched, torchrun's exit code(s)
  truth.json         the expected verdict: outcome, culprit ranks/nodes, decidable, a note

Usage (needs a Python with torch; the analyzer itself never imports torch)::

    python bench/inject/make_corpus.py --python /path/to/venv/bin/python [--out tests/corpus] [CASE ...]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

JOB = Path(__file__).with_name("job.py")
PREFIX_TEMPLATE = "[${role_name}${rank}|${local_rank}]:"
NODE_NAMES = ("gpu-node-07", "gpu-node-12")
DETAIL = {"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}
FAULTHANDLER = {"PYTHONFAULTHANDLER": "1"}
# The four cases the corpus started with keep their launch (prefix template, per-rank iteration
# lines, a faulthandler step watchdog): tests in tests/ pin what the analyzer says about them.
LEGACY = {"prefix": True, "iter_ranks": "all", "watchdog": True}

DEFAULTS = {
    "fault": "none", "rank": None, "step": None, "nproc": 4, "io": "tee", "prefix": False, "env": {},
    "pyspy": False, "hung": False, "nodes": 1, "rdzv": "static", "max_restarts": 0, "steps": 6,
    "timeout": 6, "iter_ranks": "0", "watchdog": False, "record": False, "subgroup": None,
    "attempt": "all", "rdzv_timeout": None, "agents": None, "attempt_store": False,
}

# One dict per case: the fault (job.py's PM_FAULT, its rank and step) and the launcher variation
# (DEFAULTS for the rest). io: "tee" = --redirects 3 --tee 3, "redirects" = --redirects 3 only;
# agents: agents actually started when fewer than nodes; attempt_store: job.py's PM_ATTEMPT_STORE;
# hung: copy the files while the job still hangs, then kill it (outcome "hung").
CASES: dict[str, dict] = {
    # -- the original five (names kept) --
    "skip": {**LEGACY, "fault": "skip", "rank": 2, "step": 3, "pyspy": True},
    "sleep": {**LEGACY, "fault": "sleep", "rank": 1, "step": 4, "pyspy": True},
    "kill": {**LEGACY, "fault": "kill", "rank": 3, "step": 2},
    "raise": {**LEGACY, "fault": "raise", "rank": 0, "step": 3},
    "world": {"nodes": 2, "agents": 1, "rdzv": "c10d", "rdzv_timeout": 8},   # the second node never comes
    # -- a rank never enters a collective --
    "skip-default-pyspy": {"fault": "skip", "rank": 1, "step": 3, "pyspy": True},
    "skip-redirects": {"fault": "skip", "rank": 2, "step": 2, "nproc": 3, "io": "redirects"},
    "skip-detail": {"fault": "skip", "rank": 3, "step": 3, "env": DETAIL},
    "two-node-skip": {"fault": "skip", "rank": 3, "step": 3, "nodes": 2, "nproc": 2, "rdzv": "c10d", "pyspy": True},
    "subgroup-skip": {"fault": "subgroup-skip", "rank": 3, "step": 3, "subgroup": "2,3"},
    # -- mismatched collectives --
    "extra-barrier": {"fault": "extra-barrier", "rank": 0, "step": 3},
    "extra-allreduce": {"fault": "extra-allreduce", "rank": 2, "step": 2, "nproc": 3, "iter_ranks": "all"},
    "op-broadcast": {"fault": "op-broadcast", "rank": 2, "step": 3},
    "op-allgather-detail": {"fault": "op-allgather", "rank": 1, "step": 4, "env": DETAIL},
    "size-mismatch": {"fault": "size", "rank": 1, "step": 3, "env": FAULTHANDLER},
    "size-mismatch-detail": {"fault": "size", "rank": 2, "step": 3, "env": DETAIL},
    # -- a rank busy or blocked outside the collective --
    "slow-validation": {"fault": "slow", "rank": 3, "step": 3, "iter_ranks": "all"},
    "block-hung": {"fault": "block", "rank": 2, "step": 3, "timeout": 300, "pyspy": True, "hung": True},
    # -- a rank dies --
    "data-error": {"fault": "data-error", "rank": 4, "step": 2, "nproc": 6, "record": True},
    "sigkill-8proc": {"fault": "kill", "rank": 5, "step": 2, "nproc": 8, "io": "redirects"},
    "abort": {"fault": "abort", "rank": 2, "step": 3, "env": FAULTHANDLER},
    "exit-3": {"fault": "exit", "rank": 1, "step": 3, "nproc": 2},
    "terminate": {"fault": "terminate", "rank": 0, "step": 5},
    "two-node-kill": {"fault": "kill", "rank": 1, "step": 2, "nodes": 2, "nproc": 2, "rdzv": "static"},
    # -- restarts --
    "restart-recovers": {"fault": "raise", "rank": 1, "step": 2, "max_restarts": 1, "attempt": "first",
                         "attempt_store": True},
    "restart-fails": {"fault": "data-error", "rank": 2, "step": 2, "nproc": 3, "max_restarts": 2, "rdzv": "c10d",
                      "attempt_store": True},
    # the same restart without the per-attempt store: torch 2.13's restarted gloo group fails to connect
    "restart-static": {"fault": "raise", "rank": 1, "step": 2, "max_restarts": 1, "attempt": "first"},
    # -- healthy runs that still log warnings and a caught traceback --
    "healthy-warnings": {"fault": "warn", "rank": 1, "step": 3},
    "healthy-prefix": {"fault": "warn", "rank": 0, "step": 2, "nproc": 2, "prefix": True, "iter_ranks": "all"},
    "two-node-healthy": {"fault": "warn", "rank": 2, "step": 3, "nodes": 2, "nproc": 2, "rdzv": "c10d"},
}
CULPRIT_FREE = {"none", "warn"}

# (decidable, note) per case: what reading every file of the case showed. "decidable" says
# whether the logs alone single out the culprit; the note is what an operator sees.
JUDGED: dict[str, tuple[bool, str]] = {
    "skip": (True,
        "Ranks 0, 1 and 3 raise gloo 'Timed out waiting 6000ms' in the step-3 all_reduce; rank 2 prints no "
        "error, and its faulthandler watchdog dump and py-spy stack are in lazy_optimizer_state_init, the "
        "others' in all_reduce."),
    "sleep": (True,
        "Ranks 0, 2 and 3 time out in the step-4 all_reduce; rank 1 prints no error and its watchdog dump and"
        " py-spy stack are in fault_sleep (time.sleep), outside the collective."),
    "kill": (True,
        "torchrun names rank 3 'exitcode: -9 (SIGKILL)' as the root cause and rank 3's stderr is empty; the "
        "other ranks that had time print gloo 'Connection closed by peer' / 'Connection reset by peer', the "
        "rest are SIGTERMed."),
    "raise": (True,
        "Rank 0's traceback ends in 'RuntimeError: injected failure on rank 0 at step 3' and torchrun names "
        "rank 0 (exitcode 1) as the root cause; other ranks show gloo connection errors or SIGTERM."),
    "world": (True,
        "The only agent's console is one traceback ending in 'RendezvousTimeoutError'; no worker ever started"
        " (no log-dir files), so no rank is to blame: the second node never joined."),
    "skip-default-pyspy": (True,
        "Ranks 0, 2 and 3 raise 'Timed out waiting 6000ms' in all_reduce after iteration 2; rank 1 prints no "
        "error and its py-spy dump is in lazy_optimizer_state_init (fault_skip), the others' in all_reduce."),
    "skip-redirects": (True,
        "The console holds only torchrun's ChildFailedError (no tee); in the log dir ranks 0 and 1 time out "
        "in the step-2 all_reduce while rank 2's stderr is empty and it was SIGTERMed: the culprit is only "
        "the one rank without a timeout."),
    "skip-detail": (True,
        "With DETAIL, rank 0 raises '[Rank 0]: Ranks 3 failed to pass monitoredBarrier in 6000 ms' and ranks "
        "1-2 say they reached the monitoredBarrier but got errors from rank 0; rank 3 prints no error."),
    "two-node-skip": (True,
        "On gpu-node-07 ranks 0-1 and on gpu-node-12 rank 2 time out in the step-3 all_reduce; rank 3 "
        "(gpu-node-12) has no error, is SIGTERMed, and its py-spy dump is in lazy_optimizer_state_init."),
    "subgroup-skip": (True,
        "Rank 2 times out ('Timed out waiting 6000ms') in the subgroup all_reduce of expert-parallel group "
        "[2, 3] (train_step's group=ctx.subgroup line), ranks 0-1 in the next global all_reduce; rank 3, rank"
        " 2's only partner in that group, prints no error."),
    "extra-barrier": (True,
        "Rank 0 logs 'saving checkpoint at iteration 3' and its traceback is in dist.barrier() "
        "(fault_extra_barrier) while ranks 1-3 time out in the step-3 all_reduce; all four raise gloo errors."),
    "extra-allreduce": (True,
        "Ranks 0 and 1 print iteration 6 and time out in the final dist.barrier(); rank 2, one collective "
        "ahead since step 2, printed only up to iteration 5 and is the one rank still in a train_step "
        "all_reduce ('Connection closed by peer'); nothing names the step-2 double all_reduce."),
    "op-broadcast": (True,
        "All four ranks raise gloo 'Timed out waiting 6000ms'; rank 2's traceback is in dist.broadcast "
        "(fault_op_broadcast), the others' in train_step's all_reduce."),
    "op-allgather-detail": (True,
        "With DETAIL every rank raises 'Detected mismatch between collectives on ranks': rank 1 runs "
        "OpType=ALLGATHER where ranks 0, 2 and 3 run ALLREDUCE ('Op type: ALLGATHERvs ALLREDUCE')."),
    "size-mismatch": (True,
        "Rank 1 aborts with 'terminate called after throwing an instance of gloo::EnforceNotMet' / 'Received "
        "data size doesn't match expected size' (faulthandler: fault_size -> all_reduce), exitcode -6, "
        "torchrun's root cause; the others get 'Connection reset by peer'."),
    "size-mismatch-detail": (True,
        "With DETAIL every rank raises 'Detected mismatch between collectives on ranks': rank 2 runs "
        "TensorShape=[1952] where the others run [3904] ('Tensor shapes: 3904vs 1952')."),
    "slow-validation": (True,
        "Rank 3 logs 'running validation on 512 held-out batches (rank-local)' and 'validation batch k/4' "
        "lines while ranks 0-2 time out in the step-3 all_reduce; rank 3 never errors and is SIGTERMed."),
    "block-hung": (True,
        "A snapshot of a live hang, no end: rank 0 stopped after iteration 2, no errors and no torchrun "
        "summary; rank 2's stderr has 'Exception in thread prefetch: ... OSError: [Errno 5] Input/output "
        "error', and py-spy shows rank 2 in queue.get (fault_block), the others in all_reduce."),
    "data-error": (True,
        "Rank 4 raises 'ValueError: sample 8196 in shard 00004: expected 2048 tokens, got 0 (truncated "
        "record?)'; with @record torchrun's root cause shows that traceback from error.json; other ranks show"
        " 'Connection closed by peer' or SIGTERM."),
    "sigkill-8proc": (True,
        "The console (no tee) shows torchrun's 'failed (exitcode: -9) local_rank: 5' and a root cause of rank"
        " 5 SIGKILL; rank 5's stderr is empty, some others show 'Connection reset by peer'."),
    "abort": (True,
        "Rank 2 prints 'Fatal Python error: Aborted' with its Python stack (fault_abort) and is torchrun's "
        "root cause with exitcode -6 (SIGABRT); the others show gloo connection errors or only SIGTERM."),
    "exit-3": (True,
        "Rank 1 prints no error at all and torchrun names it root cause with 'exitcode: 3'; rank 0 gets "
        "'Connection closed by peer'."),
    "terminate": (True,
        "Rank 0 logs iteration 6 and every rank prints 'done'; then rank 0's stderr has 'terminate called "
        "without an active exception' and torchrun names rank 0 (exitcode -6, SIGABRT) the root cause."),
    "two-node-kill": (True,
        "gpu-node-07's torchrun names rank 1 'exitcode: -9 (SIGKILL)' as root cause; gpu-node-12's torchrun "
        "names its own rank 2 (exitcode 1, a gloo connection error) as its root cause."),
    "restart-recovers": (True,
        "attempt_0: rank 1 raises 'RuntimeError: injected failure on rank 1 at step 2' and torchrun logs "
        "'failed (exitcode: 1) local_rank: 1'; attempt_1 runs all 6 iterations, every rank prints done, "
        "torchrun exits 0."),
    "restart-fails": (True,
        "Each of attempt_0, attempt_1 and attempt_2 has rank 2 raise 'ValueError: sample 8194 in shard 00002:"
        " expected 2048 tokens, got 0' and the others 'Connection closed by peer'; after the third failure "
        "torchrun gives up with rank 2 as root cause."),
    "restart-static": (True,
        "attempt_0: rank 1 raises 'injected failure on rank 1 at step 2'; in attempt_1 ranks fail in "
        "init_process_group with 'Gloo connectFullMesh failed with ...' ('Connection refused' or 'Connect "
        "timeout [none]', it varies: the restarted group reads the dead attempt's addresses from the agent's "
        "store), so torchrun's final root cause is whichever attempt_1 rank failed first."),
    "healthy-warnings": (True,
        "Exit 0 and every rank prints done, yet the logs hold a FutureWarning on every rank, a WARNING "
        "'throughput dropped' on rank 0 and an ERROR with a ConnectionError traceback (logging.exception) on "
        "rank 1."),
    "healthy-prefix": (True,
        "Exit 0 with the prefix template; a FutureWarning on both ranks and, on rank 0, a WARNING and an "
        "ERROR with a ConnectionError traceback (logging.exception), then 'done' on both."),
    "two-node-healthy": (True,
        "Both agents exit 0 and every rank prints done; FutureWarnings on all ranks, a WARNING on rank 0 "
        "(gpu-node-07) and a logged ConnectionError traceback on rank 2 (gpu-node-12)."),
}


def spec_of(name: str) -> dict:
    """A case's full spec: its table entry over DEFAULTS."""
    return {**DEFAULTS, **CASES[name]}


# -- launching --------------------------------------------------------------------------------

def job_env(spec: dict) -> dict:
    """The workers' environment: job.py's PM_* knobs, the case's extra variables, and the prefix
    template only where the case asks for it (never inherited from the caller)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PM_FAULT=spec["fault"],
               PM_FAULT_RANK=str(spec["rank"] if spec["rank"] is not None else -1),
               PM_FAULT_STEP=str(spec["step"] or 0), PM_FAULT_ATTEMPT=spec["attempt"],
               PM_TIMEOUT_S=str(spec["timeout"]), PM_STEPS=str(spec["steps"]), PM_ITER_RANKS=spec["iter_ranks"],
               PM_WATCHDOG="1" if spec["watchdog"] else "0", PM_RECORD="1" if spec["record"] else "0",
               PM_SUBGROUP=spec["subgroup"] or "", PM_ATTEMPT_STORE="1" if spec["attempt_store"] else "0",
               **spec["env"])
    env.pop("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE", None)
    if spec["prefix"]:
        env["TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE"] = PREFIX_TEMPLATE
    return env


def torchrun_args(python: str, spec: dict, log_dir: Path, port: int, node_rank: int) -> list[str]:
    """One agent's torchrun command line (``python -m torch.distributed.run`` = ``torchrun``)."""
    args = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(spec["nproc"]),
            "--log-dir", str(log_dir), "--redirects", "3"]
    if spec["io"] == "tee":
        args += ["--tee", "3"]
    if spec["max_restarts"]:
        args += ["--max-restarts", str(spec["max_restarts"])]
    if spec["rdzv"] == "static" and spec["nodes"] == 1:
        args += ["--master-port", str(port)]
    elif spec["rdzv"] == "c10d":
        args += ["--nnodes", str(spec["nodes"]), "--node-rank", str(node_rank), "--rdzv-backend", "c10d",
                 "--rdzv-endpoint", f"localhost:{port}", "--rdzv-id", "pm-corpus"]
        if spec["rdzv_timeout"]:
            args += ["--rdzv-conf", f"join_timeout={spec['rdzv_timeout']}"]
    else:
        args += ["--nnodes", str(spec["nodes"]), "--node-rank", str(node_rank), "--master-addr", "localhost",
                 "--master-port", str(port)]
    return args + [str(JOB)]


class Agent:
    """One torchrun agent (one "node"): its folder, console file and process."""

    def __init__(self, folder: Path, args: list[str], env: dict):
        folder.mkdir(parents=True, exist_ok=True)
        self.folder, self.args = folder, args
        self.console = open(folder / "console.log", "wb")
        self.proc = subprocess.Popen(args, stdout=self.console, stderr=subprocess.STDOUT, env=env, cwd=folder,
                                     start_new_session=True)

    def wait(self, limit_s: float = 240) -> int:
        try:
            code = self.proc.wait(timeout=limit_s)
        except subprocess.TimeoutExpired:
            self.kill()
            code = self.proc.wait()
        self.console.close()
        return code

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)


def start_agents(spec: dict, python: str, root: Path, port: int) -> list[Agent]:
    """One agent per node; a single agent keeps its files at the case's top level."""
    env = job_env(spec)
    count = spec["agents"] or spec["nodes"]
    folders = [root] if count == 1 else [root / f for f in ("node-a", "node-b")]
    agents = []
    for node_rank, folder in enumerate(folders):
        agents.append(Agent(folder, torchrun_args(python, spec, folder / "logs", port, node_rank), env))
        if node_rank + 1 < count:
            time.sleep(1.0)             # node-a's agent starts first (and gets group rank 0 under c10d)
    return agents


def wait_until_hung(spec: dict, agents: list[Agent], limit_s: float = 120) -> None:
    """Wait until rank 0 logged the step before the fault, then a while longer (the hang began)."""
    text = f"iteration {spec['step'] - 1:8d}/" if spec["step"] > 1 else "model params"
    end = time.time() + limit_s
    while time.time() < end and all(a.proc.poll() is None for a in agents):
        if any(text in f.read_text(errors="replace") for a in agents for f in a.folder.rglob("*.log")):
            break
        time.sleep(0.2)
    time.sleep(min(spec["timeout"], 10) * 0.4 if not spec["hung"] else 4)


def pyspy_dump(agent: Agent, python: str) -> None:
    """``py-spy dump`` each worker (the children of the torchrun agent) into <folder>/pyspy/."""
    pyspy = shutil.which("py-spy") or str(Path(python).with_name("py-spy"))
    if not Path(pyspy).exists():
        return
    folder = agent.folder / "pyspy"
    folder.mkdir(exist_ok=True)
    for pid in children(agent.proc.pid):
        result = subprocess.run([pyspy, "dump", "--pid", str(pid)], capture_output=True, text=True, timeout=30)
        if result.returncode == 0 and result.stdout.strip():
            (folder / f"{pid}.txt").write_text(result.stdout)


def children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


# -- after the run ----------------------------------------------------------------------------

def rank_nodes(case_dir: Path, names: tuple[str, ...]) -> dict[int, str]:
    """Global rank -> fake node name, from each node's workers' own ``rank N/W`` start line."""
    owner = {}
    for folder, name in zip(sorted(case_dir.glob("node-*")), names):
        for f in folder.glob("logs/*/attempt_0/*/stdout.log"):
            m = re.search(r"\[rank(\d+)\] train: rank \d+/", f.read_text(errors="replace"))
            if m:
                owner[int(m.group(1))] = name
    return owner


def rewrite_hosts(case_dir: Path, names: tuple[str, ...], master: str, rdzv_port: int) -> None:
    """Give each node folder its own fake host name, consistently in every text file: the
    rendezvous endpoint / master address names the master node's fake name on both nodes;
    any other ``localhost`` or this machine's host name (short or FQDN) names the node itself."""
    real = sorted({socket.gethostname(), socket.getfqdn(), "localhost"}, key=len, reverse=True)
    host = "|".join(re.escape(h) for h in real)
    for folder, name in zip(sorted(case_dir.glob("node-*")), names):
        for f in folder.rglob("*"):
            if not f.is_file():
                continue
            text = f.read_text(errors="surrogateescape")
            new = re.sub(rf"(?<![\w.-])({host}):{rdzv_port}\b", f"{master}:{rdzv_port}", text)
            new = re.sub(rf"(master_addr[=:]\s*'?)({host})(?![\w.-])", rf"\g<1>{master}", new)
            new = re.sub(rf"(?<![\w.-])({host})(?![\w-])", name, new)
            if new != text:
                f.write_text(new, errors="surrogateescape")


def clean(case_dir: Path) -> None:
    """Drop junk (bytecode caches) and empty folders (an agent that never started workers)."""
    for junk in list(case_dir.rglob("__pycache__")) + list(case_dir.rglob("*.pyc")):
        shutil.rmtree(junk) if junk.is_dir() else junk.unlink()
    for folder in sorted((d for d in case_dir.rglob("*") if d.is_dir()), key=lambda d: -len(d.parts)):
        if not any(folder.iterdir()):
            folder.rmdir()


def command_line(args: list[str], folder: Path) -> str:
    """The torchrun command as a user would type it (paths relative to the agent's folder)."""
    words = ["torchrun"] + args[3:]
    return " ".join(w.replace(str(folder) + "/", "").replace(str(JOB), "job.py") for w in words)


def write_records(name: str, spec: dict, case_dir: Path, codes: list, commands: list[str]) -> None:
    """CASE.json (what was injected, how it was launched, the exit codes) and truth.json."""
    nodes = (spec["agents"] or spec["nodes"]) > 1
    owner = rank_nodes(case_dir, NODE_NAMES) if nodes else {}
    culprits = [] if spec["fault"] in CULPRIT_FREE or spec["rank"] is None else [spec["rank"]]
    launch = {"nproc_per_node": spec["nproc"], "nodes": spec["nodes"], "io": spec["io"],
              "prefix_template": PREFIX_TEMPLATE if spec["prefix"] else None, "env": spec["env"],
              "max_restarts": spec["max_restarts"], "rdzv": spec["rdzv"],
              "pyspy": spec["pyspy"], "record": spec["record"], "watchdog": spec["watchdog"],
              "iteration_lines": "every rank" if spec["iter_ranks"] == "all" else "rank 0",
              "attempt_store": spec["attempt_store"], "command": commands[0] if len(commands) == 1 else commands}
    record = {"case": name, "fault": spec["fault"], "culprit_rank": spec["rank"], "fault_step": spec["step"],
              "fault_attempt": spec["attempt"], "timeout_s": spec["timeout"], "steps": spec["steps"],
              "world_size": spec["nproc"] * spec["nodes"], "subgroup": spec["subgroup"], "launch": launch,
              "hung": spec["hung"], "torchrun_exit": codes[0] if len(codes) == 1 else codes}
    if nodes:
        record["nodes"] = dict(zip(("node-a", "node-b"), NODE_NAMES))
        record["rank_to_node"] = {str(r): n for r, n in sorted(owner.items())}
    (case_dir / "CASE.json").write_text(json.dumps(record, indent=2) + "\n")
    truth = {"outcome": "hung" if spec["hung"] else ("completed" if all(c == 0 for c in codes) else "failed"),
             "culprit_ranks": culprits,
             "culprit_nodes": sorted({owner[r] for r in culprits if r in owner}) if nodes else []}
    if spec["max_restarts"]:
        truth["final_attempt_outcome"] = "recovered" if truth["outcome"] == "completed" else "failed"
    decidable, note = JUDGED[name]
    truth.update({"fault": spec["fault"], "fault_step": spec["step"], "decidable": decidable, "note": note})
    (case_dir / "truth.json").write_text(json.dumps(truth, indent=2) + "\n")


# -- one case ---------------------------------------------------------------------------------

def run_case(name: str, python: str, out: Path, port: int) -> None:
    spec = spec_of(name)
    case_dir = out / name
    if case_dir.exists():
        shutil.rmtree(case_dir)
    case_dir.mkdir(parents=True)
    work = Path(tempfile.mkdtemp(prefix=f"pm-{name}-")) if spec["hung"] else case_dir
    agents = start_agents(spec, python, work, port)
    if spec["pyspy"] or spec["hung"]:
        wait_until_hung(spec, agents)
        if spec["pyspy"]:
            for agent in agents:
                pyspy_dump(agent, python)
    if spec["hung"]:
        # The job still hangs: what the operator has is a snapshot taken now; then it is killed.
        shutil.copytree(work, case_dir, dirs_exist_ok=True)
        for agent in agents:
            agent.kill()
            agent.wait()
        shutil.rmtree(work, ignore_errors=True)
        codes: list[int | None] = [None] * len(agents)       # no end recorded
    else:
        codes = [agent.wait() for agent in agents]
    if (spec["agents"] or spec["nodes"]) > 1:
        owner = rank_nodes(case_dir, NODE_NAMES)
        rewrite_hosts(case_dir, NODE_NAMES, owner.get(0, NODE_NAMES[0]), port)
    clean(case_dir)
    write_records(name, spec, case_dir, codes, [command_line(a.args, a.folder) for a in agents])


# -- the README table ------------------------------------------------------------------------

FAULT_WORDS = {
    "skip": "never enters the step's all_reduce (a long detour)", "sleep": "sleeps past the timeout, then enters late",
    "slow": "rank-local validation past the timeout, logged, then enters late",
    "block": "blocks forever on a prefetch queue whose thread died",
    "extra-barrier": "an extra dist.barrier() only it calls", "extra-allreduce": "the all_reduce twice",
    "op-broadcast": "broadcast where the others all_reduce", "op-allgather": "all_gather where the others all_reduce",
    "size": "all_reduce of half the buffer", "raise": "uncaught RuntimeError", "data-error": "uncaught ValueError",
    "kill": "SIGKILL", "abort": "os.abort()", "exit": "bare sys.exit(3)",
    "terminate": "daemon thread in torch.mm at interpreter exit", "subgroup-skip": "skips the subgroup all_reduce",
    "warn": "none (warnings, a logged traceback)", "none": "none",
}


def launch_words(spec: dict) -> str:
    """A short description of a case's launcher variation."""
    agents = spec["agents"] or spec["nodes"]
    words = [f"{agents}x{spec['nproc']}" if agents > 1 else f"{spec['nproc']} procs"]
    words.append("--tee 3" if spec["io"] == "tee" else "--redirects 3 only")
    if spec["nodes"] > 1:
        words.append(f"{spec['rdzv']} rdzv" + (", 2nd node never starts" if agents == 1 else ""))
    elif spec["rdzv"] == "c10d":
        words.append("c10d rdzv")
    if spec["prefix"]:
        words.append("prefix template")
    words += [f"{k}={v}" for k, v in spec["env"].items()]
    if spec["max_restarts"]:
        words.append(f"--max-restarts {spec['max_restarts']}")
    for key, word in (("pyspy", "py-spy"), ("watchdog", "faulthandler watchdog"), ("record", "@record"),
                      ("hung", "snapshot while hung"), ("attempt_store", "per-attempt store")):
        if spec[key]:
            words.append(word)
    return ", ".join(words)


def readme_table(out: Path) -> str:
    rows = ["| case | launcher | injected fault | what an operator sees | truth |", "|---|---|---|---|---|"]
    for name in CASES:
        spec = spec_of(name)
        truth = json.loads((out / name / "truth.json").read_text())
        fault = FAULT_WORDS[spec["fault"]]
        if spec["rank"] is not None and spec["fault"] not in CULPRIT_FREE:
            fault = f"rank {spec['rank']}, step {spec['step']}: {fault}"
            if spec["attempt"] == "first":
                fault += " (first attempt only)"
        culprit = ",".join(map(str, truth["culprit_ranks"])) or "none"
        verdict = f"{truth['outcome']}, culprit {culprit}"
        if truth["culprit_nodes"]:
            verdict += f" ({', '.join(truth['culprit_nodes'])})"
        if "final_attempt_outcome" in truth:
            verdict += f", {truth['final_attempt_outcome']}"
        if not truth["decidable"]:
            verdict += ", undecidable"
        rows.append(f"| {name} | {launch_words(spec)} | {fault} | {truth['note']} | {verdict} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("cases", nargs="*", metavar="CASE", help=f"any of {', '.join(CASES)} (default: all)")
    p.add_argument("--python", default=sys.executable, help="a Python interpreter with torch installed")
    p.add_argument("--out", default=str(Path(__file__).resolve().parents[2] / "tests" / "corpus"))
    p.add_argument("--table", action="store_true", help="print the README's case table from the corpus and exit")
    args = p.parse_args(argv)
    out = Path(args.out)
    if args.table:
        print(readme_table(out), end="")
        return 0
    unknown = [c for c in args.cases if c not in CASES]
    if unknown:
        p.error(f"unknown case(s) {', '.join(unknown)}; choose from {', '.join(CASES)}")
    names = list(CASES)
    for name in args.cases or names:
        t0 = time.time()
        run_case(name, args.python, out, port=29500 + 10 * names.index(name))
        print(f"{name}: {time.time() - t0:.0f}s", file=sys.stderr, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
