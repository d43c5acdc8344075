"""torchrun / torch.distributed.elastic launcher output, and the Slurm lines around it.

Line kinds handled (``docs/formats/pytorch-failures.md`` section 7, ``docs/formats/training-logs.md``
section 1):

``exits`` -- the ``ChildFailedError`` summary, one row per failure block:

* torch >= 1.10 layout: a ``=====`` border, ``<entrypoint> FAILED``, a ``-----`` section line,
  ``Failures:`` (blocks or ``<NO_OTHER_FAILURES>``), ``Root Cause (first observed failure):``,
  blocks ``[N]:`` with the fields ``time      :``, ``host      :``, ``rank      : G (local_rank:
  L)``, ``exitcode  : C (pid: P)`` (newer releases append ``(SIGABRT)``), ``error_file:``,
  ``traceback :`` (one line, or the first line of an indented Python traceback);
* torch 1.9 layout: ``*****`` border, centred ``  <entrypoint> FAILED  ``, ``=====``
  sections, ``Root Cause:`` first and ``Other Failures:`` second, fields ``time:``, ``rank:``,
  ``exitcode:``, ``error_file:``, ``msg: "..."`` (no ``host``);
* several tables in one input (one per node agent), tables whose lines carry launcher
  prefixes (``srun --label``: the envelope peeled them; blocks are followed per prefix
  stream, so interleaved tables from several tasks stay apart), and a truncated paste whose
  first block lost its ``[N]:`` line (kept with a null ``block_index``; ``line_no`` is then
  the block's first field line).

``table_line`` is the table's ``<entrypoint> FAILED`` title line (the block's own first line when
a paste lost it): the rows of one table are one node agent's statements.

``events`` -- one ``worker_exit`` row per failure block with a non-zero exit (``detail`` the
signal, or ``exitcode 3`` for a bare exit with no signal), ``reported_rank``,
``reported_local_rank``, ``reported_pid`` as the block states them (the line is the agent's:
its attribution has no rank), ``exitcode``, ``signal``, ``root_cause``.

``signal`` comes from the ``(SIGABRT)`` suffix, else from ``Signal 6 (SIGABRT) received by
PID``, else from a negative exit code (Linux numbering).

``agent`` -- elastic agent lines, in the three logger layouts torch has used:
``E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] ...``
(glog style, about 2.3 and later; placeholder year 2000, see ``base.glog_timestamp``),
``[2024-01-10 10:21:32,123] torch.distributed.elastic.multiprocessing.api: [WARNING] ...``
(about 2.0-2.2; full year) and ``WARNING:torch.distributed.elastic.multiprocessing.api:...``
(1.9-1.13; no time). Kinds:

* ``worker_failed``: ``failed (exitcode: -6) local_rank: 6 (pid: 1246013) of binary: <py>``
  (``value`` = the binary);
* ``closing_signal``: ``Sending process 188 closing signal SIGTERM``;
* ``force_kill``: ``Unable to shutdown process 188 via Signals.SIGTERM, forcefully exiting
  via Signals.SIGKILL`` (also ``via SIGTERM , ... via SIGKILL`` of 1.9 and the bare numbers
  ``via 15, ... via 9`` that Python 3.11's ``IntEnum.__str__`` prints); ``signal`` = the kill
  signal, normalised to ``SIGKILL``;
* ``launch_config``: ``Starting elastic_operator with launch configs:`` and the indented
  ``  key : value`` lines after it (``entrypoint``, ``min_nodes``, ``max_nodes``,
  ``nproc_per_node``, ``run_id``, ``rdzv_backend``, ``rdzv_endpoint``, ``rdzv_configs``,
  ``max_restarts``, ``monitor_interval``, ``log_dir``, ``metrics_cfg``, and any newer key),
  with or without a logger header repeated on each line; one row per key, ``ts`` of the
  banner line;
* ``restart``: ``[default] Worker group FAILED. 3/3 attempts left; will restart worker
  group`` (``key`` = ``attempts_left``, ``value`` = ``3/3``), ``[default] Detected 1 new nodes
  from group_rank=4; will restart worker group`` (a membership change, no attempt used) and
  ``Restarting worker group``;
* ``rendezvous``: the agent's ``[default] Rendezvous complete for workers. Result:`` block
  (INFO) -- one row per ``  key=value`` line (``restart_count``, ``master_addr``,
  ``group_rank``, ``group_world_size``, ``local_ranks``, ``role_ranks``, ``global_ranks``, ...)
  and one per worker at the ``global_ranks=`` line (``key`` ``global_rank``, ``local_rank`` L,
  ``value`` its global rank): the agent's own statement of its mapping;
* ``group_finished``: ``[default] worker group successfully finished. Waiting 300 seconds for
  other agents to finish.`` (this node's workers all exited 0);
* ``death_signal``: ``Received Signals.SIGTERM death signal, shutting down workers`` and
  ``torch.distributed.elastic.multiprocessing.api.SignalException: Process 4105 got signal:
  15`` (``pid`` = the agent): the agent itself was signalled, typically by the scheduler.

``error_file`` and ``traceback`` are null where torch printed ``<N/A>``.

``slurm`` -- ``slurmstepd: error: *** JOB 4242 ON host CANCELLED AT 2026-07-24T13:22:05 DUE TO
TIME LIMIT ***`` and the ``STEP 4242.0`` variant (kind ``cancelled``; also without ``DUE TO``
for ``scancel``), ``*** STEP 4242.0 STEPD TERMINATED ON host AT ... DUE TO JOB NOT ENDING
WITH SIGNALS ***`` (kind ``stepd_terminated``), ``srun: error: host: task 0: Terminated`` and
``srun: error: host: tasks 2-7: Exited with exit code 1`` (``task_exit``), ``srun: Job step
aborted: Waiting up to 32 seconds for job step to finish.`` (``step_aborted``) and
``slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0 ...`` / the older ``Detected 1
oom-kill event(s) in step 4242.0 cgroup`` (``oom_kill``).
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.lines import any_literal, with_stream_where

from postmortem.parsers.base import GLOG, ParseResult, collect_each, consumed_of, glog_timestamp, to_int
from postmortem.parsers.kinds import literals_held
from postmortem.parsers.tables import SHARED

NAME = "torchrun"

SAMPLE_LINES = [
    "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
    "============================================================",
    "pretrain_gpt.py FAILED",
    "------------------------------------------------------------",
    "Failures:",
    "[1]:",
    "  time      : 2026-07-24_20:47:36",
    "  host      : node07.cluster",
    "  rank      : 57 (local_rank: 1)",
    "  exitcode  : -15 (pid: 1732)",
    "  error_file: <N/A>",
    "  traceback : Signal 15 (SIGTERM) received by PID 1732",
    "------------------------------------------------------------",
    "Root Cause (first observed failure):",
    "[0]:",
    "  time      : 2026-07-24_20:47:35",
    "  host      : node07.cluster",
    "  rank      : 58 (local_rank: 2)",
    "  exitcode  : -6 (pid: 1734)  (SIGABRT)",
    "  error_file: <N/A>",
    "  traceback : Signal 6 (SIGABRT) received by PID 1734",
    "============================================================",
    "E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] "
    "failed (exitcode: -6) local_rank: 6 (pid: 1246013) of binary: /usr/bin/python3",
    "W0813 08:21:22.981000 1245483 torch/distributed/elastic/multiprocessing/api.py:897] "
    "Sending process 1246007 closing signal SIGTERM",
    "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 188 closing signal SIGTERM",
    "[2024-01-10 10:21:32,123] torch.distributed.elastic.multiprocessing.api: [WARNING] "
    "Unable to shutdown process 188 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
    "I0813 08:00:01.000000 1245483 torch/distributed/launcher/api.py:188] "
    "Starting elastic_operator with launch configs:",
    "  entrypoint       : pretrain_gpt.py",
    "  min_nodes        : 5",
    "  max_nodes        : 5",
    "  nproc_per_node   : 8",
    "  run_id           : job4242",
    "  rdzv_backend     : c10d",
    "  rdzv_endpoint    : node01:29500",
    "  rdzv_configs     : {'timeout': 900}",
    "  max_restarts     : 0",
    "  monitor_interval : 5",
    "  log_dir          : /tmp/torchelastic_abc",
    "  metrics_cfg      : {}",
    # the agent's rendezvous result (INFO; real torch 2.13, the second of two agents: tests/torch_runs)
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553] [default] Rendezvous complete for workers. Result:",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   restart_count=0",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   master_addr=localhost",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   master_port=37905",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   group_rank=1",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   group_world_size=2",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   local_ranks=[0, 1]",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   role_ranks=[2, 3]",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   global_ranks=[2, 3]",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   role_world_sizes=[4, 4]",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   global_world_sizes=[4, 4]",
    "I1203 07:48:19.551000 5919 torch/distributed/elastic/agent/server/api.py:553]   event_log_handler=null",
    "INFO:torch.distributed.elastic.agent.server.api:[default] Worker group FAILED. "
    "3/3 attempts left; will restart worker group",
    "[default] Restarting worker group",
    "[2026-07-24 13:05:36,816] torch.distributed.elastic.agent.server.api: [INFO] [default] Detected 1 new "
    "nodes from group_rank=4; will restart worker group",
    "I0724 13:05:36.816000 4105 torch/distributed/elastic/agent/server/api.py:879] [default] worker group "
    "successfully finished. Waiting 300 seconds for other agents to finish.",
    "W0813 08:30:00.000000 1245483 torch/distributed/elastic/agent/server/api.py:704] "
    "Received Signals.SIGTERM death signal, shutting down workers",
    "torch.distributed.elastic.multiprocessing.api.SignalException: Process 4105 got signal: 15",
    "slurmstepd: error: *** JOB 4242 ON node07 CANCELLED AT 2026-07-24T13:22:05 DUE TO TIME LIMIT ***",
    "slurmstepd: error: *** STEP 4242.0 ON node07 CANCELLED AT 2026-07-24T13:22:05 ***",
    "srun: error: node07: task 0: Terminated",
    "srun: error: node08: tasks 2-7: Exited with exit code 1",
    "srun: Job step aborted: Waiting up to 32 seconds for job step to finish.",
    "slurmstepd: error: Detected 1 oom_kill event in StepId=4242.0. Some of the step tasks have been OOM Killed.",
]

EXITS_SCHEMA = {
    "line_no": pl.UInt32,
    "table_line": pl.UInt32,
    "entrypoint": pl.String,
    "block_index": pl.Int64,
    "root_cause": pl.Boolean,
    "time": pl.Datetime("us"),
    "host": pl.String,
    "rank": pl.Int64,
    "local_rank": pl.Int64,
    "exitcode": pl.Int64,
    "pid": pl.Int64,
    "signal": pl.String,
    "error_file": pl.String,
    "traceback": pl.String,
}

AGENT_SCHEMA = {
    "line_no": pl.UInt32,
    "ts": pl.Datetime("us"),
    "kind": pl.String,
    "exitcode": pl.Int64,
    "local_rank": pl.Int64,
    "pid": pl.Int64,
    "signal": pl.String,
    "key": pl.String,
    "value": pl.String,
}

# One event per failure block, so that a worker's end is on the timeline with the others'
# failures: ``kind`` ``worker_exit``; ``detail`` ``exitcode 3`` (a bare non-zero exit: no signal,
# and often no traceback: ``sys.exit(3)``, ``os._exit``) or the signal's name; ``reported_rank``,
# ``reported_local_rank``, ``reported_pid`` are what the summary names (the line is the agent's, so
# its own attribution has no rank; ``rank`` stays the attribution's, as on every event; the
# names follow ``postmortem.parsers.trainlog``'s ``reported_rank``).
EVENTS_SCHEMA = SHARED["events"].columns_of(NAME)

SLURM_SCHEMA = {
    "line_no": pl.UInt32,
    "ts": pl.Datetime("us"),
    "kind": pl.String,
    "job_id": pl.String,
    "host": pl.String,
    "tasks": pl.String,
    "exit_code": pl.Int64,
    "reason": pl.String,
}

# Linux signal numbers (torchrun reports a signal death as a negative exit code).
_SIGNALS = {
    "1": "SIGHUP", "2": "SIGINT", "3": "SIGQUIT", "4": "SIGILL", "5": "SIGTRAP", "6": "SIGABRT",
    "7": "SIGBUS", "8": "SIGFPE", "9": "SIGKILL", "10": "SIGUSR1", "11": "SIGSEGV",
    "12": "SIGUSR2", "13": "SIGPIPE", "14": "SIGALRM", "15": "SIGTERM", "16": "SIGSTKFLT",
    "17": "SIGCHLD", "18": "SIGCONT", "19": "SIGSTOP", "20": "SIGTSTP", "21": "SIGTTIN",
    "22": "SIGTTOU", "23": "SIGURG", "24": "SIGXCPU", "25": "SIGXFSZ", "26": "SIGVTALRM",
    "27": "SIGPROF", "28": "SIGWINCH", "29": "SIGIO", "30": "SIGPWR", "31": "SIGSYS",
}


# --- exits ---------------------------------------------------------------------------------
_BORDER = r"^\s*(?:={10,}|-{10,}|\*{10,})\s*$"
_HEADER = r"^\s*\[(\d+)\]:\s*$"
_FIELD = r"^\s+(?P<fkey>time|host|rank|exitcode|error_file|traceback|msg)\s*:\s?(?P<fval>.*?)\s*$"
_ENTRY = r"^\s*(\S.*?) FAILED\s*$"
_SECTION_OTHER = r"^\s*(?:Other )?Failures:\s*$"
_SECTION_ROOT = r"^\s*Root Cause(?: \(first observed failure\))?:\s*$"
_NO_OTHER = r"^\s*<NO_OTHER_FAILURES>\s*$"
_CHILD_FAILED = r"^(?:torch\.distributed\.elastic\.multiprocessing\.errors\.)?ChildFailedError:?\s*$"

# --- agent ---------------------------------------------------------------------------------
# A logger header in front of the message: glog style, the 2.0-2.2 bracketed asctime style,
# or the plain ``LEVEL:logger.name:`` of Python's basicConfig.
_LOGGER_HEAD = (
    r"^(?:\[?" + GLOG + r" ?"
    r"|\[\d{4}-\d{2}-\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?\] [\w.]+: \[[A-Z]+\] ?"
    r"|(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):[\w.]+:)"
)
_ISO_HEAD = r"^\[(\d{4}-\d{2}-\d{2})[ T](\d{2}:\d{2}:\d{2})(?:[.,](\d+))?\]"
_WORKER_FAILED = (
    r"failed \(exitcode: (?P<exitcode>-?\d+)\) local_rank: (?P<local_rank>-?\d+) "
    r"\(pid: (?P<pid>\d+)\) of binary: (?P<value>.*?)\s*$"
)
_CLOSING = r"Sending process (?P<pid>\d+) closing signal (?P<signal>[\w.]+)"
_FORCE_KILL = (
    r"Unable to shutdown process (?P<pid>\d+) via (?P<via>[\w.]+)\s*, "
    r"forcefully exiting via (?P<signal>[\w.]+)"
)
_RESTART = (
    r"(?P<state>Worker group \w+|Detected \d+ new nodes).*?"
    r"(?:(?P<value>\d+/\d+) attempts left)?;? will restart worker group"
)
_FINISHED = r"(?P<state>worker group successfully finished)"
_DEATH = r"Received (?P<signal>[\w.]+) death signal"
_SIGNAL_EXCEPTION = r"SignalException: Process (?P<pid>\d+) got signal: (?P<signal>[\w.]+)"
_LAUNCH_HEADER = "Starting elastic_operator with launch configs"
_RDZV_HEADER = "Rendezvous complete for workers"
_RDZV_LINE = r"^\s+(?P<key>[a-z][a-z0-9_]*)=(?P<value>.*?)\s*$"
_CONFIG_LINE = r"^\s+(?P<key>[a-z][a-z0-9_]*)\s*: ?(?P<value>.*?)\s*$"

# --- slurm ---------------------------------------------------------------------------------
_CANCELLED = (
    r"\*\*\* (?:JOB|STEP) (?P<job_id>[\w.+-]+) (?:ON (?P<host>\S+) )?CANCELLED AT "
    r"(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?: DUE [Tt][Oo] (?P<reason>.*?))?\s*\*\*\*"
)
_STEPD_TERMINATED = (
    r"\*\*\* (?:JOB|STEP) (?P<job_id>[\w.+-]+) STEPD TERMINATED ON (?P<host>\S+) AT "
    r"(?P<ts>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?: DUE TO (?P<reason>.*?))?\s*\*\*\*"
)
_TASK_EXIT = r"srun: error: (?P<host>[^:\s]+): tasks? (?P<tasks>[\d,\-\[\] ]*\d\]?): (?P<reason>.*?)\s*$"
_STEP_ABORTED = r"srun: Job step aborted:?\s*(?P<reason>.*?)\s*$"
_OOM = (
    r"Detected (?P<count>\d+) oom[-_]kill events?(?:\(s\))? in "
    r"(?:StepId=|step )?(?P<job_id>\d+(?:\+\d+)?(?:\.\w+)?)"
)




def _signal_name(expr: pl.Expr) -> pl.Expr:
    """``Signals.SIGKILL`` / ``SIGKILL`` / ``9`` -> ``SIGKILL``."""
    bare = expr.str.strip_chars().str.replace(rx(r"^Signals\."), "")
    by_number = bare.replace_strict(_SIGNALS, default=None, return_dtype=pl.String)
    return pl.when(bare.str.contains(rx(r"^\d+$"))).then(by_number).otherwise(bare)


def _empty(schema: dict) -> pl.DataFrame:
    return pl.DataFrame(schema=schema)


def _exits(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """The failure blocks, and the line numbers of the summary lines understood."""
    none = (_empty(EXITS_SCHEMA), pl.Series("line_no", [], dtype=pl.UInt32))
    t = pl.col("text")
    cand = df.filter(
        t.str.starts_with(" ")
        | t.str.contains("]:", literal=True)
        | t.str.contains("FAILED", literal=True)
        | t.str.contains("Failures:", literal=True)
        | t.str.contains("Root Cause", literal=True)
        | t.str.contains("NO_OTHER_FAILURES", literal=True)
        | t.str.contains("ChildFailedError", literal=True)
        | t.str.contains("==========", literal=True)
        | t.str.contains("----------", literal=True)
        | t.str.contains("**********", literal=True)
    )
    if cand.is_empty():
        return none
    field = t.str.extract_groups(rx(_FIELD))
    cand = cand.with_columns(
        fkey=field.struct.field("fkey"),
        fval=field.struct.field("fval"),
        index=to_int(t.str.extract(rx(_HEADER), 1)),
        entry_name=t.str.extract(rx(_ENTRY), 1),
    ).with_columns(
        kind=pl.when(t.str.contains(rx(_BORDER))).then(pl.lit("border"))
        .when(pl.col("index").is_not_null()).then(pl.lit("header"))
        .when(pl.col("fkey").is_not_null()).then(pl.lit("field"))
        .when(t.str.contains(rx(_SECTION_OTHER))).then(pl.lit("other"))
        .when(t.str.contains(rx(_SECTION_ROOT))).then(pl.lit("root"))
        .when(t.str.contains(rx(_NO_OTHER))).then(pl.lit("no_other"))
        .when(t.str.contains(rx(_CHILD_FAILED))).then(pl.lit("exception"))
        .when(pl.col("entry_name").is_not_null()).then(pl.lit("entry?"))
        .otherwise(None)
    ).filter(pl.col("kind").is_not_null())
    if cand.is_empty():
        return none

    s = "_stream"
    contiguous_prev = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
    contiguous_next = (pl.col("_seq").shift(-1).over(s) == pl.col("_seq") + 1).fill_null(False)
    prev_kind = pl.when(contiguous_prev).then(pl.col("kind").shift(1).over(s))
    cand = cand.with_columns(_prev_kind=prev_kind)
    # `<entrypoint> FAILED` counts only right under a border (the title line of the table).
    cand = cand.with_columns(
        kind=pl.when(pl.col("kind") == "entry?")
        .then(pl.when(pl.col("_prev_kind") == "border").then(pl.lit("entry")).otherwise(None))
        .otherwise(pl.col("kind"))
    ).filter(pl.col("kind").is_not_null())
    cand = cand.with_columns(_prev_kind=prev_kind)

    is_field = pl.col("kind") == "field"
    continues = is_field & pl.col("_prev_kind").is_in(["header", "field"]).fill_null(False)
    is_start = (pl.col("kind") == "header") | (is_field & ~continues)
    cand = cand.with_columns(
        entrypoint=pl.when(pl.col("kind") == "entry").then(pl.col("entry_name"))
        .forward_fill().over(s),
        section=pl.when(pl.col("kind") == "entry").then(pl.lit("none"))
        .when(pl.col("kind") == "other").then(pl.lit("other"))
        .when(pl.col("kind") == "root").then(pl.lit("root"))
        .forward_fill().over(s),
        block=pl.when(is_start).then(pl.col("line_no")).forward_fill().over(s),
        # The table a block belongs to: its `<entrypoint> FAILED` title line (one table per
        # node agent), or the block's own first line in a paste that lost the title.
        _title=pl.when(pl.col("kind") == "entry").then(pl.col("line_no")).forward_fill().over(s),
    )
    rows = cand.filter(pl.col("kind").is_in(["header", "field"]) & pl.col("block").is_not_null())
    if rows.is_empty():
        return none

    def value_of(*keys: str) -> pl.Expr:
        return pl.col("fval").filter(pl.col("fkey").is_in(list(keys))).first()

    blocks = rows.group_by("block", maintain_order=True).agg(
        line_no=pl.col("line_no").first(),
        table_line=pl.coalesce(pl.col("_title").first(), pl.col("line_no").first()),
        entrypoint=pl.col("entrypoint").first(),
        block_index=pl.col("index").first(),
        section=pl.col("section").first(),
        time_text=value_of("time"),
        host=value_of("host"),
        rank_text=value_of("rank"),
        exit_text=value_of("exitcode"),
        error_file=value_of("error_file"),
        traceback=value_of("traceback", "msg"),
    )
    rank = pl.col("rank_text").str.extract_groups(
        rx(r"^(?P<r>-?\d+)(?:\s*\(local_rank:\s*(?P<l>-?\d+)\))?")
    )
    code = pl.col("exit_text").str.extract_groups(
        rx(r"^(?P<c>-?\d+)(?:\s*\(pid:\s*(?P<p>\d+)\))?(?:\s*\(?(?P<sig>SIG[A-Z0-9]+)\)?)?")
    )
    # A real block always says `(local_rank: L)` or `(pid: P)`; this keeps a stray
    # `  rank : 3` of some config print from becoming a failure.
    evidence = pl.col("rank_text").str.contains("(local_rank:", literal=True).fill_null(False) | (
        pl.col("exit_text").str.contains("(pid:", literal=True).fill_null(False)
    )
    blocks = blocks.filter(evidence).with_columns(
        rank=to_int(rank.struct.field("r")),
        local_rank=to_int(rank.struct.field("l")),
        exitcode=to_int(code.struct.field("c")),
        pid=to_int(code.struct.field("p")),
        _sig_suffix=code.struct.field("sig"),
        traceback=pl.col("traceback").str.replace(r'^"(.*)"$', "$1").replace("<N/A>", None),
        error_file=pl.col("error_file").replace("<N/A>", None),
        time=pl.col("time_text").str.slice(0, 19).str.replace_all(r"[_T]", " ")
        .str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S", strict=False),
        root_cause=(pl.col("section") == "root").fill_null(False),
    )
    from_exitcode = pl.when(pl.col("exitcode") < 0).then(
        (-pl.col("exitcode")).cast(pl.String)
        .replace_strict(_SIGNALS, default=None, return_dtype=pl.String)
    )
    blocks = blocks.with_columns(
        signal=pl.coalesce(
            pl.col("_sig_suffix"),
            pl.col("traceback").str.extract(rx(r"Signal \d+ \((SIG[A-Z0-9]+)\) received by PID"), 1),
            from_exitcode,
        )
    )
    table = blocks.select(
        [pl.col(c).cast(dtype, strict=False) for c, dtype in EXITS_SCHEMA.items()]
    ).sort("line_no")

    # Consumed: lines of accepted blocks; the exception, title and section lines of a table
    # (per stream, counted from its title line) that has an accepted block; the borders
    # right next to any of those.
    accepted = blocks.select(pl.col("block"), _accepted=pl.lit(True))
    cand = cand.join(accepted, on="block", how="left", maintain_order="left").with_columns(
        _table=(pl.col("kind") == "entry").cast(pl.Int64).cum_sum().over(s)
        + (pl.col("kind") == "exception").cast(pl.Int64),
        _block_ok=pl.col("kind").is_in(["header", "field"]) & pl.col("_accepted").fill_null(False),
    )
    cand = cand.with_columns(_table_ok=pl.col("_block_ok").any().over([s, "_table"]))
    cand = cand.with_columns(
        _understood=pl.col("_block_ok")
        | (pl.col("kind").is_in(["entry", "other", "root", "no_other", "exception"]) & pl.col("_table_ok"))
    )
    near = (
        (contiguous_prev & pl.col("_understood").shift(1).over(s))
        | (contiguous_next & pl.col("_understood").shift(-1).over(s))
    ).fill_null(False)
    keep = cand.filter(pl.col("_understood") | ((pl.col("kind") == "border") & near))
    return table, keep["line_no"].cast(pl.UInt32)


def _logger_head(df: pl.DataFrame | pl.LazyFrame) -> pl.DataFrame | pl.LazyFrame:
    """Add ``ts`` (from a glog or bracketed-asctime header) and ``msg`` (the text after any
    logger header) to candidate rows."""
    g = pl.col("text").str.extract_groups(rx(r"^\[?" + GLOG))
    iso = pl.col("text").str.extract_groups(rx(_ISO_HEAD))
    iso_text = pl.concat_str(
        [iso.struct.field("1"), pl.lit(" "), iso.struct.field("2"), pl.lit("."),
         iso.struct.field("3").fill_null("0").str.slice(0, 6).str.pad_end(6, "0")]
    )
    return df.with_columns(
        ts=pl.coalesce(
            pl.when(g.struct.field("mmdd").is_not_null()).then(
                glog_timestamp(g.struct.field("mmdd"), g.struct.field("hms"), g.struct.field("frac"))
            ),
            iso_text.str.strptime(pl.Datetime("us"), "%Y-%m-%d %H:%M:%S%.f", strict=False),
        ),
        msg=pl.col("text").str.replace(rx(_LOGGER_HEAD), ""),
    )


# The agent's one-line events: (a literal of the line, kind, pattern of the message after any
# logger header, its groups, the first of which must match).
_AGENT_EVENTS = [
    ("of binary:", "worker_failed", _WORKER_FAILED, ["exitcode", "local_rank", "pid", "value"]),
    ("closing signal", "closing_signal", _CLOSING, ["pid", "signal"]),
    ("forcefully exiting via", "force_kill", _FORCE_KILL, ["pid", "signal"]),
    ("will restart worker group", "restart", _RESTART, ["state", "value"]),
    ("Restarting worker group", "restart", r"(?P<state>Restarting) worker group", ["state"]),
    ("successfully finished", "group_finished", _FINISHED, ["state"]),
    ("death signal", "death_signal", _DEATH, ["signal"]),
    ("SignalException", "death_signal", _SIGNAL_EXCEPTION, ["pid", "signal"]),
]


def _agent_events(df: pl.DataFrame) -> list[pl.DataFrame]:
    """A frame per ``_AGENT_EVENTS`` entry whose literal some line holds, in their order: which
    literals occur is one Polars call, all their rows another (a filter per entry, and a call
    per entry found, were 13 calls per chunk)."""
    t = pl.col("text")
    held = literals_held(df, "text", [literal for literal, *_rest in _AGENT_EVENTS])
    plans = []
    for literal, kind, pattern, groups in _AGENT_EVENTS:
        if literal not in held:
            continue
        sub = _logger_head(df.lazy().filter(t.str.contains(literal, literal=True)))
        m = pl.col("msg").str.extract_groups(rx(pattern))
        plans.append(sub.with_columns([m.struct.field(g).alias(g) for g in groups])
                     .filter(pl.col(groups[0]).is_not_null())
                     .with_columns(kind=pl.lit(kind)).select(["line_no", "ts", "kind", *[g for g in groups if g != "state"]]))
    return collect_each(plans)


def _agent(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    frames: list[pl.DataFrame] = _agent_events(df)

    # Launch configuration: the banner, then contiguous indented `key : value` lines.
    banner = t.str.contains(_LAUNCH_HEADER, literal=True)
    cand = df.filter(banner | ((t.str.starts_with(" ") | t.str.contains("]   ", literal=True))
                               & t.str.contains(":", literal=True)))
    if not cand.is_empty() and cand.select(banner.any()).item():
        cand = _logger_head(cand)
        cfg = pl.col("msg").str.extract_groups(rx(_CONFIG_LINE))
        cand = cand.with_columns(
            is_banner=pl.col("msg").str.contains(_LAUNCH_HEADER, literal=True),
            key=cfg.struct.field("key"),
            value=cfg.struct.field("value"),
        ).filter(pl.col("is_banner") | pl.col("key").is_not_null())
        s = "_stream"
        contiguous_prev = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
        start = pl.col("is_banner") | ~contiguous_prev
        cand = cand.with_columns(
            _banner_ts=pl.when(start).then(pl.col("ts")).forward_fill().over(s),
            _from_banner=pl.when(start).then(pl.col("is_banner")).forward_fill().over(s),
        )
        rows = cand.filter(pl.col("_from_banner") & ~pl.col("is_banner"))
        heads = cand.filter(pl.col("is_banner"))
        frames.append(heads.select("line_no", "ts", kind=pl.lit("launch_config")))
        frames.append(rows.select(
            "line_no", pl.coalesce("ts", "_banner_ts").alias("ts"),
            kind=pl.lit("launch_config"), key="key", value="value",
        ))

    frames.extend(_rendezvous(df))
    if not frames:
        return _empty(AGENT_SCHEMA)
    out = pl.concat(frames, how="diagonal_relaxed")
    out = out.lazy().with_columns(pl.lit(None).alias(c) for c in AGENT_SCHEMA if c not in out.columns).with_columns(
        key=pl.when(pl.col("kind").eq("restart") & pl.col("value").is_not_null())
        .then(pl.lit("attempts_left")).otherwise(pl.col("key")),
        signal=_signal_name(pl.col("signal").cast(pl.String)),
    )
    return out.select(
        [pl.col(c).cast(dtype, strict=False) for c, dtype in AGENT_SCHEMA.items()]
    ).sort("line_no").collect(engine="in-memory")


def _rendezvous(df: pl.DataFrame) -> list[pl.DataFrame]:
    """The agent's ``Rendezvous complete for workers. Result:`` block (INFO): one ``rendezvous``
    row per ``  key=value`` line after it, and one per worker at its ``global_ranks=`` line
    (``key`` ``global_rank``, ``local_rank`` L, ``value`` the global rank: the agent's own
    statement of which global rank each of its local ranks is)."""
    t = pl.col("text")
    banner = t.str.contains(_RDZV_HEADER, literal=True)
    cand = df.filter(banner | (t.str.contains("=", literal=True)
                               & (t.str.starts_with(" ") | t.str.contains("]   ", literal=True))))
    if cand.is_empty() or not cand.select(banner.any()).item():
        return []
    cand = _logger_head(cand)
    kv = pl.col("msg").str.extract_groups(rx(_RDZV_LINE))
    cand = cand.with_columns(
        is_banner=pl.col("msg").str.contains(_RDZV_HEADER, literal=True),
        key=kv.struct.field("key"), value=kv.struct.field("value"),
    ).filter(pl.col("is_banner") | pl.col("key").is_not_null())
    s = "_stream"
    contiguous_prev = (pl.col("_seq").shift(1).over(s) == pl.col("_seq") - 1).fill_null(False)
    start = pl.col("is_banner") | ~contiguous_prev
    cand = cand.with_columns(
        _banner_ts=pl.when(start).then(pl.col("ts")).forward_fill().over(s),
        _block=pl.when(start).then(pl.when(pl.col("is_banner")).then(pl.col("line_no"))).forward_fill().over(s),
        _from_banner=pl.when(start).then(pl.col("is_banner")).forward_fill().over(s),
    )
    rows = cand.filter(pl.col("_from_banner") & ~pl.col("is_banner")).with_columns(
        ts=pl.coalesce("ts", "_banner_ts"))
    heads = cand.filter(pl.col("is_banner")).select("line_no", "ts", kind=pl.lit("rendezvous"))
    keys = rows.select("line_no", "ts", kind=pl.lit("rendezvous"), key="key", value="value")
    lists = rows.filter(pl.col("key").is_in(["local_ranks", "global_ranks"])).select(
        "_block", "key", "line_no", "ts", ranks=pl.col("value").str.extract_all(rx(r"-?\d+")))
    local = lists.filter(pl.col("key") == "local_ranks").select("_block", _local="ranks")
    workers = (lists.filter(pl.col("key") == "global_ranks").join(local, on="_block", how="inner")
               .filter(pl.col("ranks").list.len() == pl.col("_local").list.len())
               .explode(["ranks", "_local"])
               .select("line_no", "ts", kind=pl.lit("rendezvous"), key=pl.lit("global_rank"),
                       local_rank=pl.col("_local"), value="ranks"))
    return [heads, keys, workers]


# Slurm's lines about the job: (literal, kind, pattern, its groups, the group a row must have).
_SLURM_KINDS = [
    ("CANCELLED AT", "cancelled", _CANCELLED, ["job_id", "host", "ts", "reason"], "job_id"),
    ("STEPD TERMINATED", "stepd_terminated", _STEPD_TERMINATED, ["job_id", "host", "ts", "reason"], "job_id"),
    ("srun: error:", "task_exit", _TASK_EXIT, ["host", "tasks", "reason"], "tasks"),
    ("Job step aborted", "step_aborted", _STEP_ABORTED, ["reason"], "reason"),
    ("kill event", "oom_kill", _OOM, ["count", "job_id"], "count"),
]


def _slurm(df: pl.DataFrame) -> pl.DataFrame:
    t = pl.col("text")
    # which kinds' literals the lines hold, in one call; then every held kind's rows in one plan
    held = df.select([t.str.contains(literal, literal=True).any().alias(kind) for literal, kind, *_ in _SLURM_KINDS]
                     ).row(0) if not df.is_empty() else [False] * len(_SLURM_KINDS)
    plans, columns = [], set()
    for (literal, kind, pattern, groups, first), found in zip(_SLURM_KINDS, held):
        if not found:
            continue
        m = t.str.extract_groups(rx(pattern))
        plans.append(df.lazy().filter(t.str.contains(literal, literal=True))
                     .with_columns([m.struct.field(g).alias(g) for g in groups]).filter(pl.col(first).is_not_null())
                     .select("line_no", pl.lit(kind).alias("kind"), *groups))
        columns.update(groups)
    if not plans:
        return _empty(SLURM_SCHEMA)
    out = pl.concat(plans, how="diagonal_relaxed").with_columns(
        pl.lit(None, dtype=pl.String).alias(c) for c in ("ts", "job_id", "host", "tasks", "reason", "count")
        if c not in columns)
    return out.with_columns(
        ts=pl.col("ts").str.strptime(pl.Datetime("us"), "%Y-%m-%dT%H:%M:%S", strict=False),
        exit_code=to_int(pl.col("reason").str.extract(rx(r"[Ee]xit(?:ed with exit)? code:? (-?\d+)"), 1)),
        tasks=pl.col("tasks").str.strip_chars(),
        reason=pl.when(pl.col("kind") == "oom_kill")
        .then(pl.concat_str([pl.col("count"), pl.lit(" oom_kill event(s)")]))
        .otherwise(pl.col("reason")),
    ).select(
        [pl.col(c).cast(dtype, strict=False) for c, dtype in SLURM_SCHEMA.items()]
    ).sort("line_no").collect(engine="in-memory")


# The line router: every literal ``_exits``, ``_agent``, ``_rendezvous`` and ``_slurm`` filter the
# lines on (of two ANDed ones, one), and the indent of summary fields and launch-config /
# rendezvous lines (``starts_with(" ")``). A line with none of them is no function's: one scan
# drops it. A new filter on a literal must add it here (its sample would go unconsumed otherwise).
_ROUTE = [
    "]:", "FAILED", "Failures:", "Root Cause", "NO_OTHER_FAILURES", "ChildFailedError",     # _exits
    "==========", "----------", "**********",
    "of binary:", "closing signal", "forcefully exiting via", "will restart worker group",  # _agent
    "Restarting worker group", "successfully finished", "death signal", "SignalException",
    _LAUNCH_HEADER, "]   ",
    _RDZV_HEADER,                                                                           # _rendezvous
    "CANCELLED AT", "STEPD TERMINATED", "srun: error:", "Job step aborted", "kill event",    # _slurm
]


# What every row and every line this parser understands needs in its own input: an agent event's,
# the launch and rendezvous banners', Slurm's literals, and a summary block's evidence (a rank's
# ``(local_rank: L)`` or an exit code's ``(pid: P)``, ``_exits``). The indented lines ``_ROUTE``
# also takes (a failure table's fields, launch configs) count only under one of them.
_GATE = [*(literal for literal, *_ in _AGENT_EVENTS), _LAUNCH_HEADER, _RDZV_HEADER,
         *(literal for literal, *_ in _SLURM_KINDS), "(local_rank:", "(pid:"]


def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input without one gives nothing, so the batch
    leaves it out (``postmortem.analyzer.ingest._parse_batched``; the 10,000 py-spy dumps of a job
    folder are all indented lines). tests/test_batched_parsing.py holds the skip to the full run."""
    return any_literal(text, _GATE)


def parse(lines: pl.DataFrame) -> ParseResult:
    nothing = ParseResult(tables={"exits": _empty(EXITS_SCHEMA), "agent": _empty(AGENT_SCHEMA),
                                  "slurm": _empty(SLURM_SCHEMA), "events": _empty(EVENTS_SCHEMA)})
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return nothing
    text = pl.col("text")
    df = with_stream_where(lines, text.str.starts_with(" ") | any_literal(text, _ROUTE))
    if df.is_empty():   # most chunks of a large run
        return nothing
    exits, exit_lines = _exits(df)
    agent = _agent(df)
    slurm = _slurm(df)
    consumed = consumed_of(agent, slurm, pl.DataFrame({"line_no": exit_lines}))
    return ParseResult(tables={"exits": exits, "agent": agent, "slurm": slurm, "events": _exit_events(exits)},
                       consumed=consumed)


def _exit_events(exits: pl.DataFrame) -> pl.DataFrame:
    rows = exits.filter(pl.col("exitcode").is_not_null() & (pl.col("exitcode") != 0))
    signal = pl.when(pl.col("signal").is_not_null()).then(pl.concat_str([pl.lit(" ("), pl.col("signal"), pl.lit(")")]))
    root = pl.when(pl.col("root_cause")).then(pl.lit(", torchrun's root cause"))
    return rows.select(
        "line_no", kind=pl.lit("worker_exit"), exc_type=pl.lit(None, dtype=pl.String),
        detail=pl.coalesce(pl.col("signal"), pl.concat_str([pl.lit("exitcode "), pl.col("exitcode").cast(pl.String)])),
        message=pl.concat_str([pl.lit("rank "), pl.col("rank").cast(pl.String).fill_null("?"), pl.lit(" exitcode "),
                               pl.col("exitcode").cast(pl.String), signal.otherwise(pl.lit("")),
                               root.otherwise(pl.lit(""))]),
        reported_rank="rank", reported_local_rank="local_rank", reported_pid="pid",
        exitcode="exitcode", signal="signal", root_cause="root_cause",
    ).cast(EVENTS_SCHEMA)
