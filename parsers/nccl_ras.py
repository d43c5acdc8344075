"""NCCL RAS: the ``ncclras`` client's status report (text and JSON) and the RAS INFO lines.

Reference: ``docs/formats/nccl.md`` section 3.13 (the report, NCCL 2.24+; JSON from 2.28.7) and the
RAS INFO lines of section 3.12. The report is not NCCL_DEBUG output: it is what ``ncclras``
(or ``echo status | nc localhost 28028``) prints, so it shows up only where a job's tooling
captured it -- often pasted next to the framework's own output.

Text report, every literal the client has printed (2.24 -> 2.30)::

    NCCL version 2.26.2 compiled with CUDA 12.6
    CUDA runtime version 12060, driver version 12060
    Job summary / =========== / the summary table: one-row layout ``Nodes Processes GPUs
        Processes GPUs`` + ``(total) per node per process (total) (total)``, or the mixed
        layouts (``per node per process`` / ``per node`` rows, ``Processes GPUs`` + ``per
        process`` rows, then ``(total) (total) (total)``), ``The outlier node(s):`` and
        ``  Node <ip> running process(es) <pid,pid>``
    Communicators... (0.01s) / =============   (2.24: ``Gathering data about the NCCL
        communicators (timeout Ns)...``), the group table ``Group Comms Nodes Ranks Ranks
        Ranks Status Errors`` / ``# in group per comm per node per comm in group`` and its
        rows (ranks per node may be ``7-8``; errors may be ``INCOMPLETE,ERROR,MISMATCH``),
        ``No communicator data collected!``
    Errors / ====== and Warnings / ======== sections with blocks:
        ``INCOMPLETE`` + ``Missing communicator data from N job process(es)``,
        ``DEAD`` + ``N job process(es) is/are considered dead (unreachable via the RAS network)``,
        ``  Process P on node N managing GPU(s) G``, ``  [could not find information on N process(es)]``,
        ``TIMEOUT`` + ``Encountered N communication timeout(s) while gathering communicator data``,
        ``#G-C (hash) INCOMPLETE|ERROR|MISMATCH`` and its detail lines:
        ``Missing communicator data from N rank(s)``, ``The missing rank(s): 3,5`` (2.24),
        ``Initialization error(s) on N rank(s)``, ``Asynchronous error(s) on N rank(s)``,
        ``N ranks reported <error>``, ``Communicator ranks have different status``,
        ``N ranks have status S`` (``UNKNOWN`` before 2.26, ``NOCOMM`` after),
        ``The unknown ranks: ...`` (2.24), ``Communicator ranks have different <Op> operation
        counts`` (2.24/2.25: ``collective``), ``N ranks have launched up to operation M``,
        ``N ranks have not launched any operations``, and the rank lines
        ``Rank R -- GPU G [(NVML g)] managed by process P on node N`` (or ``-- [process
        information not found]``), or for a group of one ``Rank R has status S -- ...``,
        ``Rank R has launched up to operation M -- ...``, ``Rank R has not launched any
        operations -- ...``, ``Rank R reported <error> -- ...``
    and the collection lines of the RAS-network phase (compiled out of released builds but
    listed in the reference): ``Gathering data about the RAS network (timeout Ns)...``
    [`` obtained a result in Xs``], `` Warning: encountered N communication timeout(s) while
    gathering data``, `` Warning: missing data from N process(es) (received from R, expected
    E)``, ``  The missing process(es):``, `` Collected data about N unidirectional
    connection(s)``, `` Travel times (valid only if system clocks are synchronized between
    nodes):``, ``  Minimum Xs, maximum Ys, average Zs``, `` No connection data collected!``,
    the negative-travel-time warning (three lines), ``  The affected connection(s):``,
    ``  From node A process P to node B process Q: observed travel time of Xs``.

A report is a run of such lines (blank lines, underlines, section words and the bare numbers
of the summary table count only inside a run that has at least one distinctive line); it
starts at the version line (or at the run's first line, for a paste without it). Runs are
followed per launcher-prefix stream (``postmortem.parsers.lines.with_stream``).

JSON report (2.28.7+, ``ncclras -f json``): a JSON document (pretty-printed over many lines, or
on one line) whose top level has ``nccl_version``; parsed with :mod:`json`. A truncated
document is salvaged up to its last complete object and its report row says so in
``problem`` (plus an ``events`` row ``ras_json_truncated``); nothing raises.

Tables (every row has ``line_no``; ``report_line`` is the first line of its report):

``ras_reports`` -- one row per report: ``line_no`` (first line), ``end_line``, ``format``
  (``text``/``json``), ``nccl_version``, ``cuda_compiled`` (text header), ``cuda_runtime``,
  ``cuda_driver``, ``timestamp`` (JSON, the collector's local time), ``nodes``,
  ``processes_per_node``, ``gpus_per_process``, ``processes``, ``gpus`` (text job summary;
  in the mixed layouts the per-node/per-process values are the most frequent ones and
  ``uniform`` is false), ``groups`` (rows of the group table), ``comms`` (sum of "comms in
  group"; JSON ``communicators_count``), ``collection_s`` (``Communicators... (Xs)``; JSON
  ``ras.collection_time_sec``), ``timeouts``, ``missing_processes``, ``dead_processes``,
  ``problem``.
``ras_comms`` -- text: one row per group-table row (``group``, ``comms_in_group``, ``nodes``,
  ``ranks_per_node`` as printed plus ``_min``/``_max``, ``ranks`` = ranks per comm,
  ``ranks_in_group``, ``status``, ``errors``; ``hash`` and ``missing_ranks`` only where the
  group has one communicator and a ``#G-0`` block names it). JSON: one row per communicator
  (``hash``, ``secondary_hash``, ``ranks`` = ``size``, ``ranks_reporting`` = ``ranks_count``,
  ``missing_ranks`` = ``missing_ranks_count``, ``nodes`` and ranks per node counted from the
  hosts of ``ranks[]``, ``status``/``errors`` computed the way the text client computes
  them). ``hash`` is always 16 lowercase hex digits without ``0x`` (the text spelling).
``ras_findings`` -- one row per understood line of the Errors/Warnings sections and the
  collection phase (JSON: the same rows computed from the raw data): ``section``
  (``errors``/``warnings``/``collection``), ``block_line``, ``group``, ``comm_index``,
  ``hash``, ``kind`` (the block: ``MISMATCH``, ``INCOMPLETE``, ``ERROR``, ``DEAD``,
  ``TIMEOUT``, or whatever word NCCL printed), ``what`` (``block``, ``op_count_mismatch``,
  ``launched_up_to``, ``not_launched``, ``status_mismatch``, ``has_status``, ``init_errors``,
  ``async_errors``, ``reported``, ``missing_ranks``, ``missing_processes``,
  ``dead_processes``, ``unlisted_processes``, ``timeouts``, ``no_comm_data``, and for the
  collection phase ``gathering``, ``collection_timeouts``, ``missing_data``,
  ``connections``, ``travel_min``/``travel_max``/``travel_avg``, ``no_connection_data``,
  ``negative_travel_times``, ``negative_travel_time``), ``op`` (the collective of an
  operation-count mismatch, forward-filled to its ``launched_up_to`` rows), ``count`` (N
  ranks / processes; a single listed rank gives count 1), ``op_count``, ``status`` (a
  status word or an error text), ``expected``, ``seconds`` (a duration or travel time printed),
  ``timeout_s`` (the collection timeout printed), ``message``. Counts are recorded
  as printed: in a MISMATCH the ranks NCCL lists are the minority, usually the ones *ahead*
  (nccl.md 3.13); this table does not say who is behind.
``ras_ranks`` -- one row per rank or process a report names: ``hash``, ``group``,
  ``comm_index``, ``rank``, ``gpu`` (CUDA index), ``nvml_gpu``, ``gpus`` (a process's GPU
  list as printed), ``pid``, ``node`` (an IP address or host), ``why`` (``launched_up_to``,
  ``not_launched``, ``status``, ``init_error``, ``async_error``, ``missing``,
  ``missing_process``, ``dead_process``, ``outlier_node``; JSON: ``member``, ``missing``),
  ``op``, ``op_count``, ``status``; JSON adds ``init_state``, ``async_error``,
  ``finalize_called``, ``destroy_flag``, ``abort_flag``, ``unresponsive``,
  ``considered_dead``.
``ras_rank_ops`` -- JSON only: one row per rank and collective (``hash``, ``rank``, ``op``,
  ``op_count``), the raw ``collective_counts``.
``events`` -- RAS INFO lines (``host:pid:tid [dev] NCCL INFO RAS ...``): ``ras_client_socket``
  (``RAS client listening socket at <addr>``; detail = the address),
  ``ras_client_socket_failed``, ``ras_coll_timeout`` (``RAS collective <id> timeout warning
  (Ns) -- N responses missing``; detail = the number missing), ``ras_dead_peer`` (``RAS
  declaring peer <addr> as DEAD``; detail = the peer), ``ras_send_stuck`` (``RAS send stuck
  timeout error (Ns) on socket connection with <addr>``; detail = the peer), ``ras_info``
  (any other ``RAS ...`` INFO line); and ``ras_json_truncated`` for a JSON report that did
  not parse whole.
"""

from __future__ import annotations

import bisect
import json
import re

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import ParseResult, among, conform, consumed_of, to_int
from postmortem.parsers.kinds import Kind, possible_kinds
from postmortem.parsers.lines import with_stream
from postmortem.parsers.tables import SHARED

NAME = "nccl_ras"

# Written from nccl.md 3.12/3.13 and the client's format strings (not copied from a log): INFO lines, one
# text report in report order, then JSON reports. It holds every sample line of INFO_KINDS and REPORT_KINDS
# (below; tests/test_parser_nccl_ras.py checks), which are copies of its lines.
SAMPLE_LINES = [
    "node7:4411:4480 [3] NCCL INFO RAS client listening socket at ::1<28028>",
    "node7:4411:4480 [3] NCCL INFO RAS failed to establish a client listening socket at ::1<28028>",
    "node7:4411:4480 [3] NCCL INFO RAS collective 10.0.0.7<28028>:17 timeout warning (5s) -- 2 responses missing",
    "node7:4411:4480 [3] NCCL INFO RAS declaring peer 10.0.0.9<28028> as DEAD; rasDeadPeersHash 0x1f2e3d4c5b6a7988",
    "node7:4411:4480 [3] NCCL INFO RAS send stuck timeout error (61s) on socket connection with 10.0.0.9<28028>",
    "NCCL version 2.27.3 compiled with CUDA 12.9",
    "CUDA runtime version 12090, driver version 12080",
    "",
    "Job summary",
    "===========",
    "",
    "  Nodes  Processes         GPUs  Processes     GPUs",
    "(total)   per node  per process    (total)  (total)",
    "      2          4            1          8        8",
    "",
    "  Nodes  Processes         GPUs",
    "          per node  per process",
    "      1          4            1",
    "      1          3            1",
    "",
    "  Nodes  Processes",
    "          per node",
    "      1          4",
    "",
    "         Processes         GPUs",
    "                    per process",
    "                 7            1",
    "",
    "  Nodes  Processes         GPUs",
    "(total)    (total)      (total)",
    "      2          7            7",
    "",
    "The outlier node:",
    "  Node 10.0.0.9 running processes 5120,5121,5122",
    "",
    "Gathering data about the RAS network (timeout 5s)... obtained a result in 0.012s",
    " obtained a result in 0.318s",
    " Warning: encountered 1 communication timeout while gathering data",
    " Warning: missing data from 1 process (received from 6, expected 7)",
    "  The missing process:",
    "  Process 5122 on node 10.0.0.9 managing GPU 2",
    " Collected data about 42 unidirectional connections",
    " Travel times (valid only if system clocks are synchronized between nodes):",
    "  Minimum 0.000s, maximum 0.004s, average 0.001s",
    " No connection data collected!",
    " Warning: negative travel times were observed across 1 connection,",
    " indicating that the system clocks are *not* synchronized.",
    " Ordering of events based on local timestamps should be considered unreliable",
    "  The affected connection:",
    "  From node 10.0.0.7 process 4411 to node 10.0.0.9 process 5120: observed travel time of -0.002s",
    "",
    "Gathering data about the NCCL communicators (timeout 5s)...",
    "Communicators... (0.015s)",
    "=============",
    "",
    "Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",
    "    #  in group  per comm  per node  per comm  in group",
    "    0         1         2       3-4         8         7  FINALIZE  INCOMPLETE,ERROR,MISMATCH",
    "    1         2         1         2         2         4   RUNNING      OK",
    "No communicator data collected!",
    "",
    "Errors",
    "======",
    "",
    "INCOMPLETE",
    "  Missing communicator data from 1 job process",
    "  Process 5122 on node 10.0.0.9 managing GPUs 2,3 (NVML 4,5)",
    "  [could not find information on 1 process]",
    "",
    "DEAD",
    "  2 job processes are considered dead (unreachable via the RAS network)",
    "  1 job process is considered dead (unreachable via the RAS network)",
    "",
    "#0-0 (00c0ffee12345678) INCOMPLETE",
    "  Missing communicator data from 1 rank",
    "  Rank 6 -- GPU 2 managed by process 5122 on node 10.0.0.9",
    "  The missing ranks: 6,7",
    "",
    "#0-0 (00c0ffee12345678) ERROR",
    "  Initialization errors on 2 ranks",
    "  2 ranks reported Remote process error",
    "  Rank 1 -- GPU 1 (NVML 5) managed by process 4412 on node 10.0.0.7",
    "  Rank 2 -- [process information not found]",
    "  Asynchronous error on 1 rank",
    "  Rank 3 reported Unhandled CUDA error -- GPU 3 managed by process 4414 on node 10.0.0.7",
    "",
    "Warnings",
    "========",
    "",
    "TIMEOUT",
    "  Encountered 2 communication timeouts while gathering communicator data",
    "",
    "#0-0 (00c0ffee12345678) MISMATCH",
    "  Communicator ranks have different status",
    "  5 ranks have status RUNNING",
    "  Rank 4 has status FINALIZE -- GPU 0 managed by process 5120 on node 10.0.0.9",
    "  Rank 5 has status NOCOMM -- [process information not found]",
    "  The unknown ranks: 6,7",
    "  Rank 7 has status UNKNOWN",
    "  Communicator ranks have different ReduceScatter operation counts",
    "  6 ranks have launched up to operation 1207",
    "  2 ranks have launched up to operation 1208",
    "  Rank 0 -- GPU 0 managed by process 4411 on node 10.0.0.7",
    "",
    "  Communicator ranks have different Broadcast operation counts",
    "  7 ranks have not launched any operations",
    "  Rank 5 has launched up to operation 1 -- GPU 1 managed by process 5121 on node 10.0.0.9",
    "  Communicator ranks have different AllReduce operation counts",
    "  Rank 2 has not launched any operations -- GPU 2 managed by process 4413 on node 10.0.0.7",
    "  Communicator ranks have different collective operation counts",
    "  Rank 3 has launched up to operation 88 -- [process information not found]",
    "",
    "{",
    '  "nccl_version": "2.28.7",',
    '  "cuda_runtime_version": 12090,',
    '  "cuda_driver_version": 12090,',
    '  "timestamp": "2026-03-02 10:11:12",',
    '  "communicators_count": 1,',
    '  "communicators": [',
    "    {",
    '      "hash": "0xc0ffee12345678",',
    '      "secondary_hash": "0x1a2b:0x3c4d",',
    '      "size": 2,',
    '      "ranks_count": 1,',
    '      "missing_ranks_count": 1,',
    '      "ranks": [',
    "        {",
    '          "rank": 0,',
    '          "host": "10.0.0.7",',
    '          "pid": 4411,',
    '          "cuda_dev": 0,',
    '          "nvml_dev": 0,',
    '          "status": {',
    '            "init_state": 0,',
    '            "async_error": 0,',
    '            "finalize_called": false,',
    '            "destroy_flag": false,',
    '            "abort_flag": false',
    "          },",
    '          "collective_counts": {',
    '            "Broadcast": 0,',
    '            "AllReduce": 12',
    "          }",
    "        }",
    "      ],",
    '      "missing_ranks": [',
    "        {",
    '          "rank": 1,',
    '          "host": "10.0.0.9",',
    '          "pid": 5120,',
    '          "cuda_dev": 0,',
    '          "nvml_dev": 0,',
    '          "status": {',
    '            "unresponsive": true,',
    '            "considered_dead": false',
    "          }",
    "        }",
    "      ]",
    "    }",
    "  ],",
    '  "ras": {',
    '    "collection_time_sec": 0.004,',
    '    "timeouts_count": 0',
    "  }",
    "}",
    '{"nccl_version": "2.29.1", "cuda_runtime_version": 13000, "cuda_driver_version": 13000, "communicators_count": 0, "communicators": []}',
]

REPORTS_SCHEMA = {
    "line_no": pl.UInt32, "end_line": pl.UInt32, "format": pl.String, "nccl_version": pl.String,
    "cuda_compiled": pl.String, "cuda_runtime": pl.Int64, "cuda_driver": pl.Int64, "timestamp": pl.String,
    "nodes": pl.Int64, "processes_per_node": pl.Int64, "gpus_per_process": pl.Int64, "processes": pl.Int64,
    "gpus": pl.Int64, "uniform": pl.Boolean, "groups": pl.Int64, "comms": pl.Int64,
    "collection_s": pl.Float64, "timeouts": pl.Int64, "missing_processes": pl.Int64,
    "dead_processes": pl.Int64, "problem": pl.String,
}
COMMS_SCHEMA = {
    "line_no": pl.UInt32, "report_line": pl.UInt32, "group": pl.Int64, "comms_in_group": pl.Int64,
    "hash": pl.String, "secondary_hash": pl.String, "nodes": pl.Int64, "ranks_per_node": pl.String,
    "ranks_per_node_min": pl.Int64, "ranks_per_node_max": pl.Int64, "ranks": pl.Int64,
    "ranks_in_group": pl.Int64, "ranks_reporting": pl.Int64, "status": pl.String, "errors": pl.String,
    "missing_ranks": pl.Int64,
}
FINDINGS_SCHEMA = {
    "line_no": pl.UInt32, "report_line": pl.UInt32, "block_line": pl.UInt32, "section": pl.String,
    "group": pl.Int64, "comm_index": pl.Int64, "hash": pl.String, "kind": pl.String, "what": pl.String,
    "op": pl.String, "count": pl.Int64, "op_count": pl.Int64, "status": pl.String, "expected": pl.Int64,
    "seconds": pl.Float64, "timeout_s": pl.Float64, "message": pl.String,
}
RANKS_SCHEMA = {
    "line_no": pl.UInt32, "report_line": pl.UInt32, "hash": pl.String, "group": pl.Int64,
    "comm_index": pl.Int64, "rank": pl.Int64, "gpu": pl.Int64, "nvml_gpu": pl.Int64, "gpus": pl.String,
    "pid": pl.Int64, "node": pl.String, "why": pl.String, "op": pl.String, "op_count": pl.Int64,
    "status": pl.String, "init_state": pl.Int64, "async_error": pl.Int64, "finalize_called": pl.Boolean,
    "destroy_flag": pl.Boolean, "abort_flag": pl.Boolean, "unresponsive": pl.Boolean,
    "considered_dead": pl.Boolean,
}
RANK_OPS_SCHEMA = {"line_no": pl.UInt32, "report_line": pl.UInt32, "hash": pl.String, "rank": pl.Int64,
                   "op": pl.String, "op_count": pl.Int64}
EVENTS_SCHEMA = SHARED["events"].columns_of(NAME)

TABLES = {"ras_reports": REPORTS_SCHEMA, "ras_comms": COMMS_SCHEMA, "ras_findings": FINDINGS_SCHEMA,
          "ras_ranks": RANKS_SCHEMA, "ras_rank_ops": RANK_OPS_SCHEMA, "events": EVENTS_SCHEMA}

# --------------------------------------------------------------------------- RAS INFO lines

_INFO = r"[^\s:]*:\d+:\d+ (?:\[\d+\] )?NCCL INFO (RAS .*)$"
# The RAS INFO lines' kinds, tried in order on the message after ``NCCL INFO ``; the first match
# wins, the first group is the row's ``detail``, and any other ``RAS ...`` line is ``ras_info``.
INFO_KINDS: list[Kind] = [
    Kind("ras_client_socket", "events", r"^RAS client listening socket at (\S+)", versions="2.24+",
         samples=("node7:4411:4480 [3] NCCL INFO RAS client listening socket at ::1<28028>",)),
    Kind("ras_client_socket_failed", "events", r"^RAS failed to establish a client listening socket at (\S+)",
         versions="2.24+",
         samples=("node7:4411:4480 [3] NCCL INFO RAS failed to establish a client listening socket at ::1<28028>",)),
    Kind("ras_coll_timeout", "events", r"^RAS collective \S+ timeout warning \(-?\d+s\) -- (\d+) responses? missing",
         versions="2.24+",
         samples=("node7:4411:4480 [3] NCCL INFO RAS collective 10.0.0.7<28028>:17 timeout warning (5s) -- 2 responses "
                  "missing",)),
    Kind("ras_dead_peer", "events", r"^RAS declaring peer (\S+) as DEAD", versions="2.24+",
         samples=("node7:4411:4480 [3] NCCL INFO RAS declaring peer 10.0.0.9<28028> as DEAD; rasDeadPeersHash "
                  "0x1f2e3d4c5b6a7988",)),
    Kind("ras_send_stuck", "events", r"^RAS send stuck timeout error \(-?\d+s\) on socket connection with (\S+)",
         versions="2.24+",
         samples=("node7:4411:4480 [3] NCCL INFO RAS send stuck timeout error (61s) on socket connection with "
                  "10.0.0.9<28028>",)),
]


def _info_events(df: pl.DataFrame) -> pl.DataFrame:
    sub = df.filter(pl.col("text").str.contains(" NCCL INFO RAS ", literal=True))
    if sub.is_empty():
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    sub = sub.select("line_no", msg=pl.col("text").str.extract(rx(_INFO), 1)).filter(pl.col("msg").is_not_null())
    kind = pl.lit("ras_info")
    detail = pl.lit(None, dtype=pl.String)
    for k in reversed(INFO_KINDS):
        hit = pl.col("msg").str.contains(rx(k.pattern))
        kind = pl.when(hit).then(pl.lit(k.name)).otherwise(kind)
        detail = pl.when(hit).then(pl.col("msg").str.extract(rx(k.pattern), 1)).otherwise(detail)
    return sub.select("line_no", level=pl.lit("INFO"), kind=kind, detail=detail,
                      message="msg").cast(EVENTS_SCHEMA)


# --------------------------------------------------------------------------- text report

# Lines that only a RAS report prints; a report run needs at least one of them. Literal
# pre-filter first (Aho-Corasick over the whole file), regexes only near the hits.
_GATE = [
    "compiled with CUDA", "CUDA runtime version", "Nodes  Processes", "Communicators...",
    "Gathering data about the", "Group     Comms", "No communicator data", "Missing communicator data",
    "considered dead (unreachable", "managed by process", "managing GPU", "could not find information on",
    "communication timeout", "ranks have ", "ranks reported ", "operation counts", "Initialization error",
    "Asynchronous error", "The missing rank", "The unknown ranks", "outlier node", "running process",
    "unidirectional connection", "Travel times", "travel time", "connection data collected",
    "clocks are *not*", "affected connection", "obtained a result", "process information not found",
    "s, maximum ",
]
_WINDOW = 40  # lines around a distinctive line that may belong to its report

_N = r"(?P<count>\d+)"
_RANK_TAIL = (r" -- (?:GPU (?P<gpu>\d+)(?: \(NVML (?P<nvml>\d+)\))? managed by process (?P<pid>\d+) on node "
              r"(?P<node>\S+)|\[process information not found\])$")

# Which builds print the collection lines of the RAS-network phase (see the module docstring).
_COLLECTION_PHASE = "compiled out of released builds; listed in the reference"

# The report's line kinds (``postmortem.parsers.kinds``), tried in order on the stripped line; the
# first match wins. ``table`` is where a kind's values end up (``None``: layout only).
REPORT_KINDS: list[Kind] = [
    Kind("blank", None, r"^$",
         samples=("",)),
    Kind("underline", None, r"^=+$",
         samples=("===========", "=============", "======", "========")),
    Kind("version", "ras_reports", r"^NCCL version (?P<ver>\S+) compiled with CUDA (?P<cuda>\S+)$",
         samples=("NCCL version 2.27.3 compiled with CUDA 12.9",)),
    Kind("cuda_rt", "ras_reports", r"^CUDA runtime version (?P<rt>-?\d+), driver version (?P<drv>-?\d+)$",
         samples=("CUDA runtime version 12090, driver version 12080",)),
    Kind("job_summary", None, r"^Job summary$",
         samples=("Job summary",)),
    Kind("sum_head", None, r"^Nodes\s+Processes(?:\s+GPUs(?:\s+Processes\s+GPUs)?)?$",
         samples=("  Nodes  Processes         GPUs  Processes     GPUs",
                  "  Nodes  Processes         GPUs",
                  "  Nodes  Processes")),
    Kind("sum_main", None, r"^\(total\)\s+per node\s+per process\s+\(total\)\s+\(total\)$",
         samples=("(total)   per node  per process    (total)  (total)",)),
    Kind("sum_ppn_gpp", None, r"^per node\s+per process$",
         samples=("          per node  per process",)),
    Kind("sum_ppn", None, r"^per node$",
         samples=("          per node",)),
    Kind("sum_gpp_head", None, r"^Processes\s+GPUs$",
         samples=("         Processes         GPUs",)),
    Kind("sum_gpp", None, r"^per process$",
         samples=("                    per process",)),
    Kind("sum_totals", None, r"^\(total\)\s+\(total\)\s+\(total\)$",
         samples=("(total)    (total)      (total)",)),
    Kind("numbers", "ras_reports", r"^\d+(?:\s+\d+){1,4}$",
         samples=("      2          4            1          8        8",
                  "      1          4            1",
                  "      1          3            1",
                  "      1          4",
                  "                 7            1",
                  "      2          7            7")),
    Kind("outlier_head", None, r"^The outlier nodes?:$",
         samples=("The outlier node:",)),
    Kind("outlier_node", "ras_ranks", r"^Node (?P<node>\S+) running process(?:es)? (?P<pids>\d+(?:,\d+)*)$",
         samples=("  Node 10.0.0.9 running processes 5120,5121,5122",)),
    Kind("comms_head", "ras_reports", r"^(?:Communicators\.\.\.|Gathering data about the NCCL communicators \(timeout "
                   r"(?P<timeout>[\d.]+)s\)\.\.\.)(?: \((?P<secs>[\d.]+)s\))?$",
         versions="2.24 prints `Gathering data about the NCCL communicators ...`, later ones `Communicators...`",
         samples=("Gathering data about the NCCL communicators (timeout 5s)...", "Communicators... (0.015s)")),
    Kind("ras_net", "ras_findings", r"^Gathering data about the RAS network \(timeout (?P<timeout>[\d.]+)s\)\.\.\."
                    r"(?: obtained a result in (?P<secs>[\d.]+)s)?$",
         versions=_COLLECTION_PHASE,
         samples=("Gathering data about the RAS network (timeout 5s)... obtained a result in 0.012s",)),
    Kind("obtained", "ras_findings", r"^obtained a result in (?P<secs>[\d.]+)s$",
         versions=_COLLECTION_PHASE,
         samples=(" obtained a result in 0.318s",)),
    Kind("table_head", None, r"^Group\s+Comms\s+Nodes\s+Ranks\s+Ranks\s+Ranks\s+Status\s+Errors$",
         samples=("Group     Comms     Nodes     Ranks     Ranks     Ranks    Status  Errors",)),
    Kind("table_head2", None, r"^#\s+in group\s+per comm\s+per node\s+per comm\s+in group$",
         samples=("    #  in group  per comm  per node  per comm  in group",)),
    Kind("table_row", "ras_comms", r"^(?P<group>\d+)\s+(?P<cig>\d+)\s+(?P<nodes>\d+)\s+(?P<rpn>\d+(?:-\d+)?)\s+(?P<rpc>\d+)\s+"
                 r"(?P<rig>\d+)\s+(?P<status>[A-Z]+)\s+(?P<errors>[A-Z]+(?:,[A-Z]+)*)$",
         samples=("    0         1         2       3-4         8         7  FINALIZE  INCOMPLETE,ERROR,MISMATCH",
                  "    1         2         1         2         2         4   RUNNING      OK")),
    Kind("no_comm_data", "ras_findings", r"^No communicator data collected!$",
         samples=("No communicator data collected!",)),
    Kind("section", None, r"^(?P<section>Errors|Warnings)$",
         samples=("Errors", "Warnings")),
    Kind("bare_block", "ras_findings", r"^(?P<bkind>INCOMPLETE|DEAD|TIMEOUT)$",
         samples=("INCOMPLETE", "DEAD", "TIMEOUT")),
    Kind("comm_block", "ras_findings", r"^#(?P<group>\d+)-(?P<cidx>\d+) \((?P<hash>[0-9a-fA-F]{1,16})\) (?P<bkind>[A-Z][A-Z,]*)$",
         samples=("#0-0 (00c0ffee12345678) INCOMPLETE",
                  "#0-0 (00c0ffee12345678) ERROR",
                  "#0-0 (00c0ffee12345678) MISMATCH")),
    Kind("job_missing", "ras_findings", r"^Missing communicator data from " + _N + r" job process(?:es)?$",
         samples=("  Missing communicator data from 1 job process",)),
    Kind("comm_missing", "ras_findings", r"^Missing communicator data from " + _N + r" ranks?$",
         samples=("  Missing communicator data from 1 rank",)),
    Kind("dead", "ras_findings", r"^" + _N + r" job process(?:es are| is) considered dead \(unreachable via the RAS network\)$",
         samples=("  2 job processes are considered dead (unreachable via the RAS network)",
                  "  1 job process is considered dead (unreachable via the RAS network)")),
    Kind("process", "ras_ranks", r"^Process (?P<pid>\d+) on node (?P<node>\S+) managing GPUs? (?P<gpus>.+)$",
         samples=("  Process 5122 on node 10.0.0.9 managing GPU 2",
                  "  Process 5122 on node 10.0.0.9 managing GPUs 2,3 (NVML 4,5)")),
    Kind("unlisted", "ras_findings", r"^\[could not find information on " + _N + r" process(?:es)?\]$",
         samples=("  [could not find information on 1 process]",)),
    Kind("rank_line", "ras_ranks", r"^Rank (?P<rank>\d+)(?: has status (?P<status>\S+)| has launched up to operation "
                 r"(?P<opc>\d+)| (?P<nolaunch>has not launched any operations)| reported (?P<reported>.+?))?"
                 + _RANK_TAIL,
         samples=("  Rank 6 -- GPU 2 managed by process 5122 on node 10.0.0.9",
                  "  Rank 1 -- GPU 1 (NVML 5) managed by process 4412 on node 10.0.0.7",
                  "  Rank 2 -- [process information not found]",
                  "  Rank 3 reported Unhandled CUDA error -- GPU 3 managed by process 4414 on node 10.0.0.7",
                  "  Rank 4 has status FINALIZE -- GPU 0 managed by process 5120 on node 10.0.0.9",
                  "  Rank 5 has status NOCOMM -- [process information not found]",
                  "  Rank 0 -- GPU 0 managed by process 4411 on node 10.0.0.7",
                  "  Rank 5 has launched up to operation 1 -- GPU 1 managed by process 5121 on node 10.0.0.9",
                  "  Rank 2 has not launched any operations -- GPU 2 managed by process 4413 on node 10.0.0.7",
                  "  Rank 3 has launched up to operation 88 -- [process information not found]")),
    Kind("rank_status_old", "ras_ranks", r"^Rank (?P<ranks>\d+(?:,\d+)*) has status (?P<status>\S+)$",
         samples=("  Rank 7 has status UNKNOWN",)),
    Kind("rank_list", "ras_ranks", r"^The (?P<listkind>missing|unknown) ranks?: (?P<ranks>\d+(?:,\d+)*)$",
         versions="2.24",
         samples=("  The missing ranks: 6,7", "  The unknown ranks: 6,7")),
    Kind("status_diff", "ras_findings", r"^Communicator ranks have different status$",
         samples=("  Communicator ranks have different status",)),
    Kind("op_diff", "ras_findings", r"^Communicator ranks have different (?P<op>\S+) operation counts$",
         versions="per collective from 2.26; 2.24/2.25: `collective`",
         samples=("  Communicator ranks have different ReduceScatter operation counts",
                  "  Communicator ranks have different Broadcast operation counts",
                  "  Communicator ranks have different AllReduce operation counts",
                  "  Communicator ranks have different collective operation counts")),
    Kind("have_status", "ras_findings", r"^" + _N + r" ranks have status (?P<status>\S+)$",
         samples=("  5 ranks have status RUNNING",)),
    Kind("launched", "ras_findings", r"^" + _N + r" ranks have launched up to operation (?P<opc>\d+)$",
         samples=("  6 ranks have launched up to operation 1207", "  2 ranks have launched up to operation 1208")),
    Kind("not_launched", "ras_findings", r"^" + _N + r" ranks have not launched any operations$",
         samples=("  7 ranks have not launched any operations",)),
    Kind("init_errors", "ras_findings", r"^Initialization errors? on " + _N + r" ranks?$",
         samples=("  Initialization errors on 2 ranks",)),
    Kind("async_errors", "ras_findings", r"^Asynchronous errors? on " + _N + r" ranks?$",
         samples=("  Asynchronous error on 1 rank",)),
    Kind("reported", "ras_findings", r"^" + _N + r" ranks reported (?P<status>.+)$",
         samples=("  2 ranks reported Remote process error",)),
    Kind("timeouts", "ras_findings", r"^Encountered " + _N + r" communication timeouts? while gathering communicator data$",
         samples=("  Encountered 2 communication timeouts while gathering communicator data",)),
    Kind("coll_timeouts", "ras_findings", r"^Warning: encountered " + _N + r" communication timeouts? while gathering data$",
         versions=_COLLECTION_PHASE,
         samples=(" Warning: encountered 1 communication timeout while gathering data",)),
    Kind("missing_data", "ras_findings", r"^Warning: missing data from " + _N + r" process(?:es)?(?: \(received from \d+, "
                    r"expected (?P<expected>\d+)\))?$",
         versions=_COLLECTION_PHASE,
         samples=(" Warning: missing data from 1 process (received from 6, expected 7)",)),
    Kind("missing_procs_head", None, r"^The missing process(?:es)?:$",
         versions=_COLLECTION_PHASE,
         samples=("  The missing process:",)),
    Kind("connections", "ras_findings", r"^Collected data about " + _N + r" unidirectional connections?$",
         versions=_COLLECTION_PHASE,
         samples=(" Collected data about 42 unidirectional connections",)),
    Kind("travel_head", None, r"^Travel times \(valid only if system clocks are synchronized between nodes\):$",
         versions=_COLLECTION_PHASE,
         samples=(" Travel times (valid only if system clocks are synchronized between nodes):",)),
    Kind("travel", "ras_findings", r"^Minimum (?P<tmin>-?[\d.]+)s, maximum (?P<tmax>-?[\d.]+)s, average (?P<tavg>-?[\d.]+)s$",
         versions=_COLLECTION_PHASE,
         samples=("  Minimum 0.000s, maximum 0.004s, average 0.001s",)),
    Kind("no_conn_data", "ras_findings", r"^No connection data collected!$",
         versions=_COLLECTION_PHASE,
         samples=(" No connection data collected!",)),
    Kind("negative", "ras_findings", r"^Warning: negative travel times were observed across " + _N + r" connections?,$",
         versions=_COLLECTION_PHASE,
         samples=(" Warning: negative travel times were observed across 1 connection,",)),
    Kind("negative2", None, r"^indicating that the system clocks are \*not\* synchronized\.$",
         versions=_COLLECTION_PHASE,
         samples=(" indicating that the system clocks are *not* synchronized.",)),
    Kind("negative3", None, r"^Ordering of events based on local timestamps should be considered unreliable$",
         versions=_COLLECTION_PHASE,
         samples=(" Ordering of events based on local timestamps should be considered unreliable",)),
    Kind("affected_head", None, r"^The affected connections?:$",
         versions=_COLLECTION_PHASE,
         samples=("  The affected connection:",)),
    Kind("affected", "ras_findings", r"^From node (?P<node>\S+) process (?P<pid>\d+) to node \S+ process \d+: observed travel "
                    r"time of (?P<secs>-?[\d.]+)s$",
         versions=_COLLECTION_PHASE,
         samples=("  From node 10.0.0.7 process 4411 to node 10.0.0.9 process 5120: observed travel time of -0.002s",)),
]
# Kinds that other text prints too (blank lines, underlines, section words, bare numbers): they
# belong to a report only inside a run that has at least one line of any other (distinctive) kind.
_INCIDENTAL = {"blank", "underline", "job_summary", "sum_ppn", "sum_gpp_head", "sum_gpp", "numbers", "section",
               "bare_block"}
_STRONG = [k.name for k in REPORT_KINDS if k.name not in _INCIDENTAL]

# Lines that start a block (the header values of a block are forward-filled from them).
_BLOCK_STARTS = ["version", "job_summary", "comms_head", "ras_net", "section", "bare_block", "comm_block"]
# Lines whose values apply to the rank/process lines that follow them in a block.
_CONTEXT = ["launched", "not_launched", "have_status", "reported", "comm_missing", "job_missing", "dead",
            "missing_procs_head", "op_diff", "status_diff", "init_errors", "async_errors", "rank_list"]
# kind -> what, for ras_findings rows.
_WHAT = {
    "comm_block": "block", "bare_block": "block", "op_diff": "op_count_mismatch", "launched": "launched_up_to",
    "not_launched": "not_launched", "status_diff": "status_mismatch", "have_status": "has_status",
    "init_errors": "init_errors", "async_errors": "async_errors", "reported": "reported",
    "comm_missing": "missing_ranks", "job_missing": "missing_processes", "dead": "dead_processes",
    "unlisted": "unlisted_processes", "timeouts": "timeouts", "no_comm_data": "no_comm_data",
    "ras_net": "gathering", "coll_timeouts": "collection_timeouts", "missing_data": "missing_data",
    "connections": "connections", "no_conn_data": "no_connection_data", "negative": "negative_travel_times",
    "affected": "negative_travel_time", "obtained": "gathering",
}
_SECTIONS = {"Errors": "errors", "Warnings": "warnings"}


def _classify(cand: pl.DataFrame) -> pl.DataFrame:
    s = pl.col("_s")
    kind = None
    possible = possible_kinds(cand, "_s", REPORT_KINDS)     # the others' patterns are not even compiled
    for i, k in enumerate(REPORT_KINDS):
        if i in possible:
            kind = (pl.when if kind is None else kind.when)(s.str.contains(rx(k.pattern))).then(pl.lit(k.name))
    none = pl.lit(None, dtype=pl.String)
    return cand.with_columns(_kind=none if kind is None else kind.otherwise(none))


def _extract(rep: pl.DataFrame) -> pl.DataFrame:
    """Every report line with the named groups of its kind's pattern as (string) columns."""
    parts = [rep.filter(~pl.col("_kind").is_in(list(_PATTERN_GROUPS)))]
    for kind, pattern in _PATTERN_GROUPS.items():
        sub = rep.filter(pl.col("_kind") == kind)
        if sub.is_empty():
            continue
        parts.append(sub.with_columns(_g=pl.col("_s").str.extract_groups(rx(pattern))).unnest("_g"))
    return pl.concat(parts, how="diagonal_relaxed").sort("line_no")


_PATTERN_GROUPS = {k.name: k.pattern for k in REPORT_KINDS if re.compile(k.pattern).groupindex}
_GROUP_COLUMNS = sorted({g for p in _PATTERN_GROUPS.values() for g in re.compile(p).groupindex})


def _text_reports(df: pl.DataFrame, exclude: pl.Series | None) -> dict[str, pl.DataFrame]:
    t = pl.col("text")
    gate = t.str.contains_any(_GATE)
    hits = df.select(gate.any()).item()
    if not hits:
        return {}
    strong_ln = pl.when(gate).then(pl.col("line_no").cast(pl.Int64))
    near = df.with_columns(_prev=strong_ln.forward_fill(), _next=strong_ln.backward_fill()).filter(
        ((pl.col("line_no").cast(pl.Int64) - pl.col("_prev")) <= _WINDOW).fill_null(False)
        | ((pl.col("_next") - pl.col("line_no").cast(pl.Int64)) <= _WINDOW).fill_null(False)
    ).drop("_prev", "_next")
    if exclude is not None and len(exclude):
        near = near.filter(~pl.col("line_no").is_in(among(exclude)))
    cand = _classify(near.with_columns(_s=t.str.strip_chars()))
    st = "_stream"
    contiguous = (pl.col("_seq").shift(1).over(st) == pl.col("_seq") - 1).fill_null(False)
    is_rep = pl.col("_kind").is_not_null()
    cand = cand.with_columns(
        _run=(is_rep & ~(contiguous & is_rep.shift(1).over(st).fill_null(False))).cast(pl.Int64).cum_sum().over(st)
    )
    rep = cand.filter(is_rep)
    strong = pl.col("_kind").is_in(_STRONG)
    nonblank_seq = pl.when(pl.col("_kind") != "blank").then(pl.col("_seq"))
    rep = rep.filter(strong.any().over(st, "_run")).filter(
        (pl.col("_seq") >= nonblank_seq.min().over(st, "_run"))
        & (pl.col("_seq") <= nonblank_seq.max().over(st, "_run"))
    )
    if rep.is_empty():
        return {}
    rep = _extract(rep)
    for c in _GROUP_COLUMNS:
        if c not in rep.columns:
            rep = rep.with_columns(pl.lit(None, dtype=pl.String).alias(c))
    k = pl.col("_kind")

    # Report boundaries: the version line, the first line of a run, or a "Job summary" that
    # does not follow a version header (two header-less reports back to back).
    run_first = pl.col("_seq") == pl.col("_seq").min().over(st, "_run")
    prev_kind = pl.when(k != "blank").then(k).forward_fill().shift(1).over(st, "_run")
    start = (k == "version") | run_first | (
        (k == "job_summary") & ~prev_kind.is_in(["version", "cuda_rt"]).fill_null(False))
    rep = rep.with_columns(_report=pl.when(start).then(pl.col("line_no")).forward_fill().over(st, "_run"))
    block_start = k.is_in(_BLOCK_STARTS) | (pl.col("line_no") == pl.col("_report"))
    part = (pl.when(k.is_in(["job_summary", "sum_head"])).then(pl.lit("summary"))
            .when(k == "comms_head").then(pl.lit("comms"))
            .when(k == "ras_net").then(pl.lit("collection"))
            .when(k == "section").then(pl.col("section").replace_strict(_SECTIONS, default=None)))
    rep = rep.with_columns(
        _block=pl.when(block_start).then(pl.col("line_no")).forward_fill().over(st),
        _part=part.forward_fill().over(st, "_report"),
        _sumhdr=pl.when(k.is_in(["sum_main", "sum_ppn_gpp", "sum_ppn", "sum_gpp", "sum_totals"])).then(k)
        .forward_fill().over(st, "_report"),
    )
    header = k.is_in(["comm_block", "bare_block"])
    rep = rep.with_columns(
        _group=pl.when(header).then(to_int(pl.col("group"))).forward_fill().over(st, "_block"),
        _cidx=pl.when(header).then(to_int(pl.col("cidx"))).forward_fill().over(st, "_block"),
        _hash=pl.when(header).then(pl.col("hash").str.to_lowercase().str.pad_start(16, "0"))
        .forward_fill().over(st, "_block"),
        _bkind=pl.when(header).then(pl.col("bkind")).forward_fill().over(st, "_block"),
        _op=pl.when(k == "op_diff").then(pl.col("op")).when(k == "status_diff").then(pl.lit(""))
        .forward_fill().over(st, "_block").replace("", None),
        _phase=pl.when(k == "init_errors").then(pl.lit("init_error"))
        .when(k == "async_errors").then(pl.lit("async_error")).forward_fill().over(st, "_block"),
        _count=to_int(pl.col("count")),
        _opc=to_int(pl.col("opc")),
    )
    # What a line says about the ranks/processes it lists (own values for context lines and
    # self-describing single-rank lines).
    why = (pl.when(k == "launched").then(pl.lit("launched_up_to"))
           .when(k == "not_launched").then(pl.lit("not_launched"))
           .when(k.is_in(["have_status", "rank_status_old"])).then(pl.lit("status"))
           .when(k == "reported").then(pl.col("_phase").fill_null("reported"))
           .when(k.is_in(["comm_missing"])).then(pl.lit("missing"))
           .when(k == "rank_list").then(pl.when(pl.col("listkind") == "missing").then(pl.lit("missing"))
                                       .otherwise(pl.lit("status")))
           .when(k.is_in(["job_missing", "missing_procs_head"])).then(pl.lit("missing_process"))
           .when(k == "dead").then(pl.lit("dead_process"))
           .when(k == "rank_line").then(
               pl.when(pl.col("status").is_not_null()).then(pl.lit("status"))
               .when(pl.col("opc").is_not_null()).then(pl.lit("launched_up_to"))
               .when(pl.col("nolaunch").is_not_null()).then(pl.lit("not_launched"))
               .when(pl.col("reported").is_not_null()).then(pl.col("_phase").fill_null("reported"))))
    own_status = (pl.when(k == "rank_list").then(pl.when(pl.col("listkind") == "unknown").then(pl.lit("UNKNOWN")))
                  .when(k == "reported").then(pl.col("status"))
                  .otherwise(pl.coalesce(pl.col("status"), pl.col("reported"))))
    own_opc = pl.when(k.is_in(["not_launched"]) | pl.col("nolaunch").is_not_null()).then(pl.lit(0, dtype=pl.Int64)) \
        .otherwise(pl.col("_opc"))
    rep = rep.with_columns(_why=why, _ostatus=own_status, _oopc=own_opc)
    rep = rep.with_columns(_ctx=pl.when(k.is_in(_CONTEXT)).then(pl.col("line_no")).forward_fill().over(st, "_block"))
    ctx = rep.filter(k.is_in(_CONTEXT)).select(
        _ctx="line_no", _cwhy="_why", _cstatus="_ostatus", _copc="_oopc")
    rep = rep.join(ctx, on="_ctx", how="left", maintain_order="left")
    rep = rep.with_columns(
        _rwhy=pl.coalesce("_why", "_cwhy"),
        _rstatus=pl.when(pl.col("_why").is_not_null()).then(pl.col("_ostatus")).otherwise(pl.col("_cstatus")),
        _ropc=pl.when(pl.col("_why").is_not_null()).then(pl.col("_oopc")).otherwise(pl.col("_copc")),
    )

    tables = {
        "ras_reports": _text_report_rows(rep),
        "ras_comms": _text_comm_rows(rep),
        "ras_findings": _text_finding_rows(rep),
        "ras_ranks": _text_rank_rows(rep),
    }
    tables["_consumed"] = rep.select("line_no")
    return tables


def _text_report_rows(rep: pl.DataFrame) -> pl.DataFrame:
    k = pl.col("_kind")
    nums = pl.col("_s").str.extract_all(rx(r"\d+"))
    n = nums.list.len()

    def num(i: int) -> pl.Expr:
        return to_int(nums.list.get(i, null_on_oob=True))

    h = pl.col("_sumhdr")
    isnum = k == "numbers"
    rep = rep.with_columns(
        _nodes=pl.when(isnum & (h == "sum_main") & (n == 5)).then(num(0))
        .when(isnum & (h == "sum_totals") & (n == 3)).then(num(0)),
        _ppn=pl.when(isnum & (h == "sum_main") & (n == 5)).then(num(1))
        .when(isnum & h.is_in(["sum_ppn_gpp", "sum_ppn"]) & (n >= 2)).then(num(1)),
        _gpp=pl.when(isnum & (h == "sum_main") & (n == 5)).then(num(2))
        .when(isnum & (h == "sum_ppn_gpp") & (n == 3)).then(num(2))
        .when(isnum & (h == "sum_gpp") & (n == 2)).then(num(1)),
        _procs=pl.when(isnum & (h == "sum_main") & (n == 5)).then(num(3))
        .when(isnum & (h == "sum_totals") & (n == 3)).then(num(1)),
        _gpus=pl.when(isnum & (h == "sum_main") & (n == 5)).then(num(4))
        .when(isnum & (h == "sum_totals") & (n == 3)).then(num(2)),
        _uniform=pl.when(k == "sum_main").then(pl.lit(True))
        .when(k.is_in(["sum_ppn_gpp", "sum_ppn", "sum_totals"])).then(pl.lit(False)),
    )

    def first(col: str) -> pl.Expr:
        return pl.col(col).drop_nulls().first()

    def total(kind: str) -> pl.Expr:
        return pl.when((k == kind).any()).then(pl.col("_count").filter(k == kind).sum())

    out = rep.group_by("_report", maintain_order=True).agg(
        end_line=pl.col("line_no").max(),
        nccl_version=first("ver"), cuda_compiled=first("cuda"),
        cuda_runtime=to_int(first("rt")), cuda_driver=to_int(first("drv")),
        nodes=first("_nodes"), processes_per_node=first("_ppn"), gpus_per_process=first("_gpp"),
        processes=first("_procs"), gpus=first("_gpus"), uniform=first("_uniform"),
        groups=(k == "table_row").sum(),
        comms=pl.when((k == "table_row").any()).then(to_int(pl.col("cig")).filter(k == "table_row").sum()),
        collection_s=pl.col("secs").filter(k == "comms_head").drop_nulls().first().cast(pl.Float64, strict=False),
        timeouts=total("timeouts"), missing_processes=total("job_missing"), dead_processes=total("dead"),
    )
    return conform(out.rename({"_report": "line_no"}).with_columns(format=pl.lit("text")), REPORTS_SCHEMA)


def _text_comm_rows(rep: pl.DataFrame) -> pl.DataFrame:
    k = pl.col("_kind")
    rows = rep.filter(k == "table_row")
    if rows.is_empty():
        return pl.DataFrame(schema=COMMS_SCHEMA)
    rpn = pl.col("rpn")
    rows = rows.select(
        "line_no", report_line="_report", group=to_int(pl.col("group")), comms_in_group=to_int(pl.col("cig")),
        nodes=to_int(pl.col("nodes")), ranks_per_node=rpn,
        ranks_per_node_min=to_int(rpn.str.extract(rx(r"^(\d+)"), 1)),
        ranks_per_node_max=to_int(rpn.str.extract(rx(r"(\d+)$"), 1)),
        ranks=to_int(pl.col("rpc")), ranks_in_group=to_int(pl.col("rig")), status="status", errors="errors",
    )
    blocks = rep.filter(k == "comm_block").select(report_line="_report", group="_group", hash="_hash")
    hashes = blocks.group_by("report_line", "group").agg(
        _nhash=pl.col("hash").n_unique(), _hash=pl.col("hash").first())
    missing = rep.filter(k == "comm_missing").group_by(
        pl.col("_report").alias("report_line"), pl.col("_group").alias("group")).agg(_missing=pl.col("_count").sum())
    rows = rows.join(hashes, on=["report_line", "group"], how="left", maintain_order="left").join(
        missing, on=["report_line", "group"], how="left", maintain_order="left")
    single = (pl.col("comms_in_group") == 1) & (pl.col("_nhash") == 1)
    rows = rows.with_columns(
        hash=pl.when(single).then(pl.col("_hash")),
        missing_ranks=pl.when(single).then(pl.col("_missing")),
    )
    return conform(rows, COMMS_SCHEMA)


def _text_finding_rows(rep: pl.DataFrame) -> pl.DataFrame:
    k = pl.col("_kind")
    rank_line = k == "rank_line"
    single = rank_line & pl.col("_why").is_not_null()  # "Rank R has launched up to ..." etc.
    rows = rep.filter(k.is_in(list(_WHAT)) | single | (k == "travel"))
    if rows.is_empty():
        return pl.DataFrame(schema=FINDINGS_SCHEMA)
    what = (pl.when(k == "rank_line").then(
        pl.col("_why").replace({"status": "has_status", "init_error": "reported", "async_error": "reported"}))
        .otherwise(k.replace_strict(_WHAT, default=None)))
    section = pl.when(k.is_in(["ras_net", "obtained", "coll_timeouts", "missing_data", "connections", "travel",
                               "no_conn_data", "negative", "affected"])).then(pl.lit("collection")) \
        .otherwise(pl.col("_part"))
    base = rows.with_columns(
        report_line=pl.col("_report"), block_line=pl.col("_block"), section=section, group="_group",
        comm_index="_cidx", hash="_hash", kind="_bkind", what=what,
        op=pl.when(k.is_in(["op_diff", "launched", "not_launched"]) | (rank_line & pl.col("_why").is_in(
            ["launched_up_to", "not_launched"]))).then(pl.col("_op")),
        count=pl.when(single).then(pl.lit(1, dtype=pl.Int64)).otherwise(pl.col("_count")),
        op_count=pl.when(k.is_in(["launched", "not_launched"]) | single).then(pl.col("_oopc")),
        status=pl.when(k.is_in(["have_status", "reported"]) | single).then(pl.col("_ostatus")),
        expected=to_int(pl.col("expected")),
        seconds=pl.col("secs").cast(pl.Float64, strict=False),
        timeout_s=pl.col("timeout").cast(pl.Float64, strict=False),
        message="_s",
    )
    # "Minimum Xs, maximum Ys, average Zs" -> three rows.
    travel = base.filter(k == "travel")
    base = base.filter(k != "travel")
    parts = [base]
    for col, name in (("tmin", "travel_min"), ("tmax", "travel_max"), ("tavg", "travel_avg")):
        parts.append(travel.with_columns(what=pl.lit(name), seconds=pl.col(col).cast(pl.Float64, strict=False)))
    out = pl.concat(parts, how="diagonal_relaxed").sort("line_no", maintain_order=True)
    return conform(out, FINDINGS_SCHEMA)


def _text_rank_rows(rep: pl.DataFrame) -> pl.DataFrame:
    k = pl.col("_kind")
    common = dict(report_line=pl.col("_report"), hash="_hash", group="_group", comm_index="_cidx")
    ranks = rep.filter(k == "rank_line").select(
        "line_no", **common, rank=to_int(pl.col("rank")), gpu=to_int(pl.col("gpu")),
        nvml_gpu=to_int(pl.coalesce(pl.col("nvml"), pl.col("gpu"))), pid=to_int(pl.col("pid")), node="node",
        why="_rwhy", status="_rstatus", op_count="_ropc",
        op=pl.when(pl.col("_rwhy").is_in(["launched_up_to", "not_launched"])).then(pl.col("_op")),
    )
    listed = rep.filter(k.is_in(["rank_list", "rank_status_old"])).select(
        "line_no", **common, rank=pl.col("ranks").str.split(","), why="_rwhy", status="_rstatus",
    ).explode("rank").with_columns(rank=to_int(pl.col("rank")))
    procs = rep.filter(k == "process").select(
        "line_no", **common, gpus="gpus", gpu=to_int(pl.col("gpus").str.extract(rx(r"^(\d+)(?: \(NVML \d+\))?$"), 1)),
        nvml_gpu=to_int(pl.coalesce(pl.col("gpus").str.extract(rx(r"^\d+ \(NVML (\d+)\)$"), 1),
                                    pl.col("gpus").str.extract(rx(r"^(\d+)$"), 1))),
        pid=to_int(pl.col("pid")), node="node", why=pl.col("_rwhy").fill_null("process"),
    )
    outliers = rep.filter(k == "outlier_node").select(
        "line_no", **common, node="node", pid=pl.col("pids").str.split(","), why=pl.lit("outlier_node"),
    ).explode("pid").with_columns(pid=to_int(pl.col("pid")))
    out = pl.concat([ranks, listed, procs, outliers], how="diagonal_relaxed").sort("line_no", maintain_order=True)
    return conform(out, RANKS_SCHEMA)


# --------------------------------------------------------------------------- JSON report

_JSONISH = r"^\s*(?:[{}\[\]\"]|-?\d|true|false|null)"
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]')
_KEY = re.compile(r'"(hash|rank)"\s*:')
_OPS_ORDER = ["Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"]
_STATUS_ORDER = ["NOCOMM", "INIT", "RUNNING", "FINALIZE", "ABORT"]
_NCCL_ERRORS = {1: "Unhandled CUDA error", 2: "System error", 3: "Internal error", 4: "Invalid argument",
                5: "Invalid usage", 6: "Remote process error", 7: "NCCL operation in progress"}


def _int(v) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) and -(1 << 63) <= v < (1 << 63) else None


def _float(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _str(v) -> str | None:
    return v if isinstance(v, str) else None


def _bool(v) -> bool | None:
    return v if isinstance(v, bool) else None


def _dict(v) -> dict:
    return v if isinstance(v, dict) else {}


def _list(v) -> list:
    return v if isinstance(v, list) else []


def _norm_hash(v) -> str | None:
    if not isinstance(v, str):
        return None
    h = v.strip().lower()
    h = h[2:] if h.startswith("0x") else h
    if not h or len(h) > 16 or any(c not in "0123456789abcdef" for c in h):
        return v
    return h.rjust(16, "0")


def _salvage(text: str) -> tuple[object, int]:
    """The longest prefix of a truncated JSON document that parses once its open brackets are
    closed; (None, 0) when there is none."""
    stack: list[str] = []
    cuts: list[tuple[int, str]] = []
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok in ("{", "["):
            stack.append(tok)
        elif tok in ("}", "]"):
            if stack:
                stack.pop()
            if stack:
                cuts.append((m.end(), "".join("}" if c == "{" else "]" for c in reversed(stack))))
    for end, closers in reversed(cuts[-64:]):
        try:
            return json.loads(text[:end] + closers), end
        except (ValueError, RecursionError):
            continue
    return None, 0


def _decode(text: str) -> tuple[object, int, str | None]:
    """(document, end offset, problem)."""
    lead = len(text) - len(text.lstrip())
    try:
        obj, end = json.JSONDecoder().raw_decode(text, lead)
        return obj, end, None
    except json.JSONDecodeError as exc:
        problem = f"JSON RAS report does not parse ({exc.msg} at char {exc.pos})"
    except RecursionError:
        return None, len(text), "JSON RAS report nests too deeply to read"
    obj, end = _salvage(text[lead:])
    if obj is None:
        return None, len(text), problem + "; nothing could be recovered"
    return obj, len(text), problem + "; truncated: kept the objects that were complete"


def _rank_status(st: dict) -> str | None:
    if not st:
        return None
    if st.get("abort_flag") is True:
        return "ABORT"
    if st.get("finalize_called") is True or st.get("destroy_flag") is True:
        return "FINALIZE"
    init = _int(st.get("init_state"))
    if init is None:
        return None
    return "RUNNING" if init == 0 else "INIT"


def _json_block(lines: list[int], texts: list[str], out: dict[str, list]) -> int:
    """Parse one JSON block; append rows to ``out``; return the last line it used (0: not a report)."""
    starts, pos = [], 0
    for text in texts:
        starts.append(pos)
        pos += len(text) + 1
    joined = "\n".join(texts)
    if '"communicators' not in joined and '"cuda_runtime_version"' not in joined:
        return 0  # some other JSON that mentions nccl_version: not a RAS report
    obj, end, problem = _decode(joined)
    if problem is None and not (isinstance(obj, dict) and ("communicators" in obj or "cuda_runtime_version" in obj)):
        return 0
    last = lines[min(bisect.bisect_right(starts, max(end - 1, 0)) - 1, len(lines) - 1)]
    report_line = lines[0]

    def line_at(offset: int) -> int:
        return lines[max(0, bisect.bisect_right(starts, offset) - 1)]

    # Where each object starts: the `{` before its first key ("hash" / "rank"), in document order.
    hash_lines, rank_lines = [], []
    for m in _KEY.finditer(joined, 0, end):
        brace = joined.rfind("{", 0, m.start())
        (hash_lines if m.group(1) == "hash" else rank_lines).append(line_at(max(brace, 0)))
    doc = _dict(obj)
    if problem:
        out["events"].append({"line_no": report_line, "level": None, "kind": "ras_json_truncated",
                              "detail": None, "message": problem})
    comms = _list(doc.get("communicators"))
    ras = _dict(doc.get("ras"))
    out["ras_reports"].append({
        "line_no": report_line, "end_line": last, "format": "json",
        "nccl_version": _str(doc.get("nccl_version")), "cuda_runtime": _int(doc.get("cuda_runtime_version")),
        "cuda_driver": _int(doc.get("cuda_driver_version")), "timestamp": _str(doc.get("timestamp")),
        "comms": _int(doc.get("communicators_count")), "collection_s": _float(ras.get("collection_time_sec")),
        "timeouts": _int(ras.get("timeouts_count")), "problem": problem,
    })
    timeouts = _int(ras.get("timeouts_count"))
    if timeouts:
        out["ras_findings"].append({"line_no": report_line, "report_line": report_line, "block_line": report_line,
                                    "section": "warnings", "kind": "TIMEOUT", "what": "timeouts",
                                    "count": timeouts, "message": "ras.timeouts_count"})
    rank_iter = iter(rank_lines)
    for ci, comm in enumerate(comms):
        comm = _dict(comm)
        cline = hash_lines[ci] if ci < len(hash_lines) else report_line
        h = _norm_hash(comm.get("hash"))
        members = [_dict(r) for r in _list(comm.get("ranks"))]
        missing = [_dict(r) for r in _list(comm.get("missing_ranks"))]
        statuses: dict[str, int] = {}
        hosts: dict[str, int] = {}
        ops: dict[str, dict[int, int]] = {}
        init_err: dict[int, int] = {}
        async_err: dict[int, int] = {}
        for r in members:
            rline = next(rank_iter, report_line)
            st = _dict(r.get("status"))
            status = _rank_status(st)
            rank = _int(r.get("rank"))
            if status:
                statuses[status] = statuses.get(status, 0) + 1
            host = _str(r.get("host"))
            if host is not None:
                hosts[host] = hosts.get(host, 0) + 1
            init, aerr = _int(st.get("init_state")), _int(st.get("async_error"))
            if init not in (None, 0, 7):
                init_err[init] = init_err.get(init, 0) + 1
            if aerr not in (None, 0, 7):
                async_err[aerr] = async_err.get(aerr, 0) + 1
            out["ras_ranks"].append({
                "line_no": rline, "report_line": report_line, "hash": h, "rank": rank, "gpu": _int(r.get("cuda_dev")),
                "nvml_gpu": _int(r.get("nvml_dev")), "pid": _int(r.get("pid")), "node": host, "why": "member",
                "status": status, "init_state": init, "async_error": aerr,
                "finalize_called": _bool(st.get("finalize_called")), "destroy_flag": _bool(st.get("destroy_flag")),
                "abort_flag": _bool(st.get("abort_flag")),
            })
            for op, n in _dict(r.get("collective_counts")).items():
                n = _int(n)
                out["ras_rank_ops"].append({"line_no": rline, "report_line": report_line, "hash": h, "rank": rank,
                                            "op": str(op), "op_count": n})
                ops.setdefault(str(op), {})
                ops[str(op)][n] = ops[str(op)].get(n, 0) + 1
        unresponsive = nocomm = 0
        for r in missing:
            rline = next(rank_iter, report_line)
            st = _dict(r.get("status"))
            unr = _bool(st.get("unresponsive"))
            if unr is True:
                unresponsive += 1
            elif unr is False:
                nocomm += 1
            out["ras_ranks"].append({
                "line_no": rline, "report_line": report_line, "hash": h, "rank": _int(r.get("rank")),
                "gpu": _int(r.get("cuda_dev")), "nvml_gpu": _int(r.get("nvml_dev")), "pid": _int(r.get("pid")),
                "node": _str(r.get("host")), "why": "missing", "status": "NOCOMM" if unr is False else None,
                "unresponsive": unr, "considered_dead": _bool(st.get("considered_dead")),
            })
        if nocomm:
            statuses["NOCOMM"] = nocomm
        mismatch_ops = [op for op, values in ops.items() if len(values) > 1]
        errors = [name for name, on in (("INCOMPLETE", unresponsive > 0), ("ERROR", bool(init_err or async_err)),
                                        ("MISMATCH", bool(mismatch_ops) or len(statuses) > 1 or nocomm > 0)) if on]
        top = max((_STATUS_ORDER.index(s) for s in statuses), default=None)
        per_node = list(hosts.values())
        out["ras_comms"].append({
            "line_no": cline, "report_line": report_line, "hash": h,
            "secondary_hash": _str(comm.get("secondary_hash")), "nodes": len(hosts) if members else None,
            "ranks_per_node": (str(min(per_node)) if min(per_node) == max(per_node)
                               else f"{min(per_node)}-{max(per_node)}") if per_node else None,
            "ranks_per_node_min": min(per_node) if per_node else None,
            "ranks_per_node_max": max(per_node) if per_node else None,
            "ranks": _int(comm.get("size")), "ranks_reporting": _int(comm.get("ranks_count")),
            "missing_ranks": _int(comm.get("missing_ranks_count")),
            "status": _STATUS_ORDER[top] if top is not None else None,
            "errors": ",".join(errors) if errors else ("OK" if members else None),
        })
        base = {"line_no": cline, "report_line": report_line, "block_line": cline, "hash": h}

        def finding(**kw) -> None:
            out["ras_findings"].append({**base, **kw})

        if unresponsive:
            finding(section="errors", kind="INCOMPLETE", what="block")
            finding(section="errors", kind="INCOMPLETE", what="missing_ranks", count=unresponsive)
        if init_err or async_err:
            finding(section="errors", kind="ERROR", what="block")
            for what, errs in (("init_errors", init_err), ("async_errors", async_err)):
                if errs:
                    finding(section="errors", kind="ERROR", what=what, count=sum(errs.values()))
                    for code, n in sorted(errs.items(), key=lambda kv: (-kv[1], kv[0])):
                        finding(section="errors", kind="ERROR", what="reported", count=n,
                                status=_NCCL_ERRORS.get(code, "Unexpected error"))
        if "MISMATCH" in errors:
            finding(section="warnings", kind="MISMATCH", what="block")
            if len(statuses) > 1:
                finding(section="warnings", kind="MISMATCH", what="status_mismatch")
                for s, n in sorted(statuses.items(), key=lambda kv: (-kv[1], -_STATUS_ORDER.index(kv[0]))):
                    finding(section="warnings", kind="MISMATCH", what="has_status", count=n, status=s)
            order = sorted(mismatch_ops, key=lambda o: (_OPS_ORDER.index(o) if o in _OPS_ORDER else 99, o))
            for op in order:
                finding(section="warnings", kind="MISMATCH", what="op_count_mismatch", op=op)
                for value, n in sorted(ops[op].items(), key=lambda kv: (-kv[1], -(kv[0] or 0))):
                    finding(section="warnings", kind="MISMATCH", op=op, count=n, op_count=value,
                            what="launched_up_to" if value else "not_launched")
    return last


def _json_reports(df: pl.DataFrame) -> dict[str, pl.DataFrame]:
    t = pl.col("text")
    if not df.select(t.str.contains('"nccl_version"', literal=True).any()).item():
        return {}
    st = "_stream"
    first = df.filter(t.str.contains('"nccl_version"', literal=True))["line_no"].min()
    sub = df.filter(pl.col("line_no") >= max(int(first) - 1, 1))
    contiguous = (pl.col("_seq").shift(1).over(st) == pl.col("_seq") - 1).fill_null(False)
    s = t.str.strip_chars()
    prev = pl.when(contiguous).then(s.shift(1).over(st))
    key = t.str.contains('"nccl_version"', literal=True)
    # The document starts at the `{` line before the first key, or on the key's line itself.
    sub = sub.with_columns(
        _start=(key & (s.str.starts_with("{") | (prev != "{").fill_null(True)))
        | ((s == "{") & key.shift(-1).over(st).fill_null(False)
           & (pl.col("_seq").shift(-1).over(st) == pl.col("_seq") + 1).fill_null(False)),
        _jsonish=t.str.contains(rx(_JSONISH)),
    )
    sub = sub.with_columns(
        _seg=(~pl.col("_jsonish") | ~contiguous | pl.col("_start")).cast(pl.Int64).cum_sum().over(st))
    sub = sub.with_columns(_block=pl.when(pl.col("_start")).then(pl.col("line_no")).forward_fill().over(st, "_seg"))
    blocks = sub.filter(pl.col("_block").is_not_null() & (pl.col("_jsonish") | pl.col("_start")))
    if blocks.is_empty():
        return {}
    grouped = blocks.group_by("_block", maintain_order=True).agg(pl.col("line_no"), pl.col("text"))
    out: dict[str, list] = {name: [] for name in TABLES}
    used: list[int] = []
    for lines, texts in zip(grouped["line_no"].to_list(), grouped["text"].to_list()):
        last = _json_block(lines, texts, out)
        used.extend(n for n in lines if n <= last)
    tables = {name: pl.DataFrame([{c: r.get(c) for c in TABLES[name]} for r in rows], schema=TABLES[name])
              for name, rows in out.items()}
    tables["_consumed"] = pl.DataFrame({"line_no": pl.Series(used, dtype=pl.UInt32)})
    return tables


# --------------------------------------------------------------------------- entry point

def _empty_tables() -> dict[str, pl.DataFrame]:
    return {name: pl.DataFrame(schema=schema) for name, schema in TABLES.items()}


def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from: an input with none gives nothing (postmortem.analyzer.ingest
    skips the parser there; tests/test_batched_parsing.py holds the skip to the full run)."""
    # RAS INFO lines, JSON reports, text reports (parse's three parts)
    # (one regex of all the literals: its SIMD literal search is faster here than
    # ``contains_any``'s automaton)
    text = text.fill_null("")
    return text.str.contains(rx("|".join(pl.escape_regex(literal) for literal in [" NCCL INFO RAS ", '"nccl_version"', *_GATE])))


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines is None or lines.is_empty() or "text" not in lines.columns:
        return ParseResult(tables=_empty_tables())
    df = with_stream(lines)
    parts = [{"events": _info_events(df)}]
    js = _json_reports(df)
    parts.append(js)
    exclude = js.get("_consumed")
    parts.append(_text_reports(df, exclude["line_no"] if exclude is not None else None))
    tables = {}
    for name, schema in TABLES.items():
        frames = [p[name] for p in parts if name in p and not p[name].is_empty()]
        tables[name] = (pl.concat([f.cast(schema) for f in frames]).sort("line_no", maintain_order=True)
                        if frames else pl.DataFrame(schema=schema))
    consumed = consumed_of(tables["events"].filter(pl.col("kind") != "ras_json_truncated"),
                           *[p["_consumed"] for p in parts if "_consumed" in p])
    return ParseResult(tables=tables, consumed=consumed)
