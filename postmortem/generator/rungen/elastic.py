"""torchrun agent output, the ChildFailedError summary, and Slurm's own lines.

Formats: ``docs/formats/pytorch-failures.md`` section 7 and ``docs/formats/training-logs.md`` section 1.
The agent logs through Python logging: ``[2026-07-24 13:05:36,816] torch.distributed...: [ERROR]``
up to 2.3, glog style ``E0724 13:05:36.816000 <thread or pid> torch/distributed/...py:NNN]`` from 2.4.

What torchrun really does when a worker fails (``SubprocessContext._poll``): it records the
workers that have *already exited* with a non-zero code, then SIGTERMs the rest ("Sending process
P closing signal SIGTERM"), then logs "failed (exitcode ...)" for the earliest failure and raises
ChildFailedError. The workers it terminated itself are not in the table.
"""

from __future__ import annotations

from dataclasses import dataclass

from .base import Agent, Clock
from .eras import Era

ENTRYPOINT = "pretrain_gpt.py"
PYTHON_BIN = "/usr/bin/python"
SIGNAL_NAMES = {6: "SIGABRT", 9: "SIGKILL", 15: "SIGTERM", 11: "SIGSEGV"}

# (dotted logger name, file path under torch/, line) per message, for the glog-style eras.
_SITES = {
    "omp": ("torch.distributed.run", "distributed/run.py", 792),
    "launch": ("torch.distributed.launcher.api", "distributed/launcher/api.py", 194),
    "sending": ("torch.distributed.elastic.multiprocessing.api", "distributed/elastic/multiprocessing/api.py", 897),
    "unable": ("torch.distributed.elastic.multiprocessing.api", "distributed/elastic/multiprocessing/api.py", 914),
    "failed": ("torch.distributed.elastic.multiprocessing.api", "distributed/elastic/multiprocessing/api.py", 869),
    "agent": ("torch.distributed.elastic.agent.server.api", "distributed/elastic/agent/server/api.py", 879),
    "restart": ("torch.distributed.elastic.agent.server.api", "distributed/elastic/agent/server/api.py", 908),
    "death": ("torch.distributed.elastic.agent.server.api", "distributed/elastic/agent/server/api.py", 723),
    "done": ("torch.distributed.elastic.agent.server.api", "distributed/elastic/agent/server/api.py", 946),
}
_LEVELS = {"I": "INFO", "W": "WARNING", "E": "ERROR"}


@dataclass(frozen=True)
class Failure:
    """One row of a ChildFailedError table."""

    t: float
    host: str
    rank: int
    local_rank: int
    exitcode: int
    pid: int


class AgentLog:
    """The console output of one torchrun agent."""

    def __init__(self, era: Era, clock: Clock, agent: Agent, thread_ident: int):
        self.era, self.clock, self.agent, self.thread_ident = era, clock, agent, thread_ident

    @property
    def _site_packages(self) -> str:
        return f"/usr/local/lib/python{self.era.python}/dist-packages"

    def _prefix(self, t: float, level: str, site: str) -> str:
        logger, path, line = _SITES[site]
        if self.era.elastic_log == "bracket":
            return f"[{self.clock.pylog(t)}] {logger}: [{_LEVELS[level]}] "
        who = self.thread_ident if self.era.elastic_log == "glog-thread" else self.agent.pid
        return f"{level}{self.clock.glog_py(t)} {who} torch/{path}:{line}] "

    def log(self, t: float, level: str, site: str, message: str) -> None:
        """One logging call; continuation lines of a multi-line message carry no prefix."""
        self.agent.log(t, self._prefix(t, level, site) + message)

    def omp_banner(self, t: float) -> None:
        for text in ("", "*****************************************",
                     "Setting OMP_NUM_THREADS environment variable for each process to be 1 in default, to avoid "
                     "your system being overloaded, please further tune the variable for optimal performance in "
                     "your application as needed. ",
                     "*****************************************"):
            self.log(t, "W", "omp", text)

    def launch_configs(self, t: float, nodes: int, nproc: int, run_id: str, endpoint: str,
                       max_restarts: int, log_dir: str) -> None:
        fields = [("entrypoint", ENTRYPOINT), ("min_nodes", nodes), ("max_nodes", nodes),
                  ("nproc_per_node", nproc), ("run_id", run_id), ("rdzv_backend", "c10d"),
                  ("rdzv_endpoint", endpoint), ("rdzv_configs", "{'timeout': 900}"),
                  ("max_restarts", max_restarts), ("monitor_interval", self.era.monitor_interval_s),
                  ("log_dir", log_dir), ("metrics_cfg", "{}")]
        body = "\n".join(f"  {name:<17}: {value}" for name, value in fields)
        self.log(t, "I", "launch", "Starting elastic_operator with launch configs:\n" + body + "\n")

    def sending_sigterm(self, t: float, pid: int) -> None:
        self.log(t, "W", "sending", f"Sending process {pid} closing signal SIGTERM")

    def unable_to_shutdown(self, t: float, pid: int) -> None:
        self.log(t, "W", "unable", f"Unable to shutdown process {pid} via Signals.SIGTERM, forcefully "
                                   "exiting via Signals.SIGKILL")

    def failed(self, t: float, first: Failure) -> None:
        self.log(t, "E", "failed", f"failed (exitcode: {first.exitcode}) local_rank: {first.local_rank} "
                                   f"(pid: {first.pid}) of binary: {PYTHON_BIN}")

    def will_restart(self, t: float, remaining: int, max_restarts: int) -> None:
        self.log(t, "I", "restart", f"[default] Worker group FAILED. {remaining}/{max_restarts} attempts left; "
                                    "will restart worker group")

    def new_nodes_detected(self, t: float, group_rank: int) -> None:
        self.log(t, "I", "restart", f"[default] Detected 1 new nodes from group_rank={group_rank}; "
                                    "will restart worker group")

    def death_signal(self, t: float) -> None:
        self.log(t, "W", "death", "Received Signals.SIGTERM death signal, shutting down workers")

    def finished(self, t: float) -> None:
        self.log(t, "I", "agent", "[default] worker group successfully finished. Waiting 300 seconds for "
                                  "other agents to finish.")
        self.log(t + 0.31, "I", "done", "Done waiting for other agents. Elapsed: 0.3105 seconds")

    # -- tracebacks ------------------------------------------------------------------------

    def _frames(self, frames: list[tuple[str, int, str, str, str]]) -> list[str]:
        """``File ...`` pairs; Python 3.11+ adds caret lines under the failing expression."""
        out = []
        for path, line, fn, code, carets in frames:
            out.append(f'  File "{path}", line {line}, in {fn}')
            out.append(f"    {code}")
            if carets and self.era.python >= "3.11":
                out.append(carets)
        return out

    def _launcher_frames(self) -> list[tuple[str, int, str, str, str]]:
        torch = f"{self._site_packages}/torch"
        return [
            ("/usr/local/bin/torchrun", 8, "<module>", "sys.exit(main())", "             ^^^^^^"),
            (f"{torch}/distributed/elastic/multiprocessing/errors/__init__.py", 355, "wrapper",
             "return f(*args, **kwargs)", "           ^^^^^^^^^^^^^^^^^^"),
            (f"{torch}/distributed/run.py", 918, "main", "run(args)", ""),
            (f"{torch}/distributed/run.py", 909, "run", "elastic_launch(", ""),
            (f"{torch}/distributed/launcher/api.py", 138, "__call__",
             "return launch_agent(self._config, self._entrypoint, list(args))",
             "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^"),
        ]

    def child_failed_error(self, t: float, failures: list[Failure]) -> None:
        torch = f"{self._site_packages}/torch"
        frames = self._launcher_frames() + [(f"{torch}/distributed/launcher/api.py", 269, "launch_agent",
                                             "raise ChildFailedError(", "")]
        text = ["Traceback (most recent call last):", *self._frames(frames),
                "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                *child_failed_summary(self.clock, failures)]
        self.agent.log(t, *text)

    def signal_exception(self, t: float) -> None:
        torch = f"{self._site_packages}/torch"
        frames = self._launcher_frames() + [
            (f"{torch}/distributed/launcher/api.py", 260, "launch_agent", "result = agent.run()", "             ^^^^^^^^^^^"),
            (f"{torch}/distributed/elastic/metrics/api.py", 137, "wrapper", "result = f(*args, **kwargs)",
             "             ^^^^^^^^^^^^^^^^^^"),
            (f"{torch}/distributed/elastic/agent/server/api.py", 711, "run", "result = self._invoke_run(role)",
             "             ^^^^^^^^^^^^^^^^^^^^^^"),
            (f"{torch}/distributed/elastic/agent/server/api.py", 870, "_invoke_run", "time.sleep(monitor_interval)", ""),
            (f"{torch}/distributed/elastic/multiprocessing/api.py", 84, "_terminate_process_handler",
             'raise SignalException(f"Process {os.getpid()} got signal: {sigval}", sigval=sigval)', ""),
        ]
        self.agent.log(t, "Traceback (most recent call last):", *self._frames(frames),
                       f"torch.distributed.elastic.multiprocessing.api.SignalException: Process {self.agent.pid} "
                       "got signal: 15")


def first_failure(failures: list[Failure]) -> Failure:
    """``get_first_failure()``: the smallest timestamp (whole seconds); ties go to the first entry,
    i.e. the lowest local rank -- not necessarily the process that died first."""
    return min(failures, key=lambda f: (int(f.t), f.local_rank))


def child_failed_summary(clock: Clock, failures: list[Failure]) -> list[str]:
    """The table exactly as ``ChildFailedError.format_msg`` lays it out (section 7.1)."""
    root = first_failure(failures)
    blocks, root_block = [], ""
    for index, failure in enumerate(failures):
        block = _failure_block(clock, index, failure)
        if failure is root:
            root_block = block
        else:
            blocks.append(block)
    title = f"{ENTRYPOINT} FAILED"
    width = 60  # min(max(title and block widths), 60): the blocks are always wider than 60
    return ["=" * width, title, "-" * width, "Failures:",
            *("\n".join(blocks) or "  <NO_OTHER_FAILURES>").split("\n"),
            "-" * width, "Root Cause (first observed failure):", *root_block.split("\n"), "=" * width]


def _failure_block(clock: Clock, index: int, failure: Failure) -> str:
    if failure.exitcode < 0:
        signal = -failure.exitcode
        traceback = f"Signal {signal} ({SIGNAL_NAMES.get(signal, 'SIG?')}) received by PID {failure.pid}"
    else:
        traceback = "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"
    return "\n".join([
        f"[{index}]:",
        f"  time      : {clock.elastic_failure(failure.t)}",
        f"  host      : {failure.host}",
        f"  rank      : {failure.rank} (local_rank: {failure.local_rank})",
        f"  exitcode  : {failure.exitcode} (pid: {failure.pid})",
        "  error_file: <N/A>",
        f"  traceback : {traceback}",
    ])


# -- Slurm -----------------------------------------------------------------------------------

def task_ranges(tasks: list[int]) -> str:
    """srun's compressed task list: ``16,18-23``."""
    tasks = sorted(tasks)
    parts, start = [], None
    for i, task in enumerate(tasks):
        if start is None:
            start = task
        if i + 1 == len(tasks) or tasks[i + 1] != task + 1:
            parts.append(str(start) if start == task else f"{start}-{task}")
            start = None
    return ",".join(parts)


def srun_task_error(host: str, tasks: list[int], exitcode: int) -> str:
    noun = "task" if len(tasks) == 1 else "tasks"
    if exitcode == -6:
        what = "Aborted (core dumped)"
    elif exitcode == -15:
        what = "Terminated"
    elif exitcode == -9:
        what = "Killed"
    else:
        what = f"Exited with exit code {exitcode}"
    return f"srun: error: {host}: {noun} {task_ranges(tasks)}: {what}"


def job_cancelled(clock: Clock, t: float, job_id: int, host: str) -> str:
    return f"slurmstepd: error: *** JOB {job_id} ON {host} CANCELLED AT {clock.slurm(t)} ***"


def step_cancelled(clock: Clock, t: float, job_id: int, host: str) -> str:
    return f"slurmstepd: error: *** STEP {job_id}.0 ON {host} CANCELLED AT {clock.slurm(t)} ***"
