"""PyTorch c10d / ProcessGroupNCCL messages: the watchdog family, in every era.

Reference: ``docs/formats/pytorch-failures.md`` sections 1-7. After the envelope has peeled
launcher prefixes and ``[rankN]:``, a c10d line is::

    [<glog header>] <PG prefix><message>

glog header: ``E0909 09:55:29.307629539 ProcessGroupNCCL.cpp:607`` (>= 2.4) or
``E ProcessGroupNCCL.cpp:1537`` (<= 2.3, no date). PG prefix, by era::

    [Rank 3]                                      all eras (WorkNCCL-level messages)
    [PG 0 Rank 7]                                 ~2.2-2.3
    [PG 0 (default_pg) Rank 12]                   ~2.4
    [PG ID 12 PG GUID 99(EXPERT_GROUP) Rank 4]    >= 2.5 (GUID and description optional)

The PG rank is the rank *within that process group*; only PG 0 (or ``default_pg``) ranks are
global ranks. Messages handled, into tables:

* ``collectives``: watchdog timeouts and blocking-wait timeouts with their WorkNCCL
  descriptor (SeqNum, OpType, NumelIn, NumelOut, Timeout(ms); three descriptor eras), the
  ``ran for`` time; DETAIL fingerprint mismatches (one row per fingerprint named).
* ``progress``: the PG status line in its three wordings, the periodic work update, the
  dump-signal line (which carries the receiving rank's own PG-0 progress).
* ``events``: every other understood message: heartbeat monitor, watchdog stuck, teardown,
  watchdog exception, dump coordination, store errors, NCCL and CUDA errors, terminate /
  what(), C++ frames, DESYNC_DEBUG reports, monitoredBarrier, store-based barrier,
  ncclUniqueId store errors, Python tracebacks and exception lines; DETAIL's 2023+ diff lines
  (``fingerprint_diff``), DDP's model check (``ddp_model_mismatch``), the failed collective's
  stack (``failed_collective_stack``) and the watchdog-stuck follow-ups (GIL, C++ stack dump).
  ``postmortem.parsers.torch_errors`` adds the multi-line and normalised views (one event per traceback,
  OOM sizes in MiB, CUDA fault classes, faulthandler, Gloo, rendezvous, signals).
* ``settings``: the HeartbeatMonitor / PGNCCL Watchdog / ProcessGroupNCCL environment banners.

A C++ ``terminate`` (``terminate called after throwing an instance of 'T'``, ``terminate called
without an active exception``) is a ``terminate`` event (``detail`` = T); its ``  what():  <message>``
line is the message: a ``terminate`` event, unless the message is itself one of the messages
above -- ``c10::DistBackendError``'s ``what():  [PG ... Rank r] Process group watchdog thread
terminated with exception: [Rank N] Watchdog caught collective operation timeout: WorkNCCL(...)``
is a ``watchdog_timeout`` collectives row (its PG prefix parsed as on a logged line; the message
keeps its ``what():`` so the two can be told apart).

Lines wrapped by whoever pasted them (``...operation timeout: `` + newline + ``WorkNCCL(``)
are joined before matching; both physical lines count as consumed.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import GLOG, ParseResult, conform, conform_lazy, consumed_of, glog_timestamp, to_int
from postmortem.parsers.kinds import Kind, first_kind, kind_name, possible_kinds, samples_of
from postmortem.parsers.tables import SHARED

NAME = "c10d"

_HEADER = rf"^\[{GLOG} ?"
_PG = (
    r"\[(?:PG ID (?P<pg_id>\d+) PG GUID (?P<pg_guid>[^\s(\]]*)(?:\((?P<pg_desc>[^)]*)\))? "
    r"|PG (?P<pg_id_old>\d+) (?:\((?P<pg_desc_old>[^)]*)\) )?)?Rank (?P<pg_rank>-?\d+)\]"
)
_WORK = (
    r"WorkNCCL\((?:SeqNum=(?P<seq>-?\d+), )?OpType=(?P<op>\w+)"
    r"(?:, NumelIn=(?P<numel_in>-?\d+), NumelOut=(?P<numel_out>-?\d+))?"
    r", Timeout\(ms\)=(?P<timeout_ms>\d+)\)"
)

# Cheap literal prefilter: a line is looked at only if it holds one of these.
_LITERALS = [
    "ProcessGroupNCCL", "WorkNCCL", "[Rank ", "[PG ", "TCPStore", "[c10d]", "Exception raised from",
    "frame #", "terminate called", "what():", "NCCL error", "nccl", "Last error:", "CUDA",
    "TORCH_USE_CUDA_DSA", "CollectiveFingerPrint", " - [", "lagging", "started ranks:",
    "finished ranks:", "] started ", "] finished ", "monitoredBarrier", "store based barrier",
    "store-based barrier", "ncclUniqueId", "Traceback (most recent call last)", '  File "',
    "Error", "Exception", "environments:",
    # issue 4: DETAIL diff lines, DDP model check, failed-collective stack, watchdog-stuck follow-ups
    "differ in the following", "vs ", "DDP expects same model", "Stack trace of the failed collective",
    "acquire GIL", "c++ stacktraces", "wait longer to verify", "store_based_barrier_key",
]

# The message kinds (``postmortem.parsers.kinds``): pattern on the message after the glog header and PG
# prefix are taken off. The first match wins; the parser-wide prefilter is ``_LITERALS``.
KINDS: list[Kind] = [
    Kind("watchdog_timeout", "collectives", rf"Watchdog caught collective operation timeout: {_WORK} ran for (?P<ran_for_ms>\d+) milliseconds",
         samples=(
             '[E909 09:55:29.307629539 ProcessGroupNCCL.cpp:607] [Rank 14] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=2070, OpType=REDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600034 milliseconds before timing out.',
             '[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=382085, OpType=ALLREDUCE, Timeout(ms)=1800000) ran for 1800474 milliseconds before timing out.',
             '[E ProcessGroupNCCL.cpp:587] [Rank 0] Watchdog caught collective operation timeout: WorkNCCL(OpType=BROADCAST, Timeout(ms)=1800000) ran for 1806119 milliseconds before timing out.',
             '[E0724 13:05:40.1 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception: [Rank 3] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7219, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600081 milliseconds before timing out.',
             '  what():  [PG ID 0 PG GUID 0(default_pg) Rank 1] Process group watchdog thread terminated with exception: [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=7, OpType=ALLREDUCE, NumelIn=4096, NumelOut=4096, Timeout(ms)=6000) ran for 6004 milliseconds before timing out.',)),
    Kind("blocking_wait_timeout", "collectives", rf"Work {_WORK} timed out in blocking wait",
         samples=('[E928 16:16:22.196124891 ProcessGroupNCCL.cpp:817] [Rank 6] Work WorkNCCL(SeqNum=43379, OpType=_ALLGATHER_BASE, NumelIn=8069120, NumelOut=64552960, Timeout(ms)=600000) timed out in blocking wait.',)),
    Kind("pg_status", "progress", r"(?:Timeout at NCCL work|Exception \(either an error or timeout\) detected by watchdog at work): (?P<failing_seq>-?\d+), last enqueued NCCL work: (?P<last_enqueued>-?\d+), last completed NCCL work: (?P<last_completed>-?\d+)",
         samples=(
             '[E ProcessGroupNCCL.cpp:1537] [PG 0 Rank 7] Timeout at NCCL work: 1, last enqueued NCCL work: 1, last completed NCCL work: 3452013982.',
             '[E909 09:55:29.313379098 ProcessGroupNCCL.cpp:1664] [PG 0 (default_pg) Rank 12] Exception (either an error or timeout) detected by watchdog at work: 2070, last enqueued NCCL work: 2070, last completed NCCL work: 2069.',)),
    Kind("pg_status", "progress", r"failure detected by watchdog at work sequence id: (?P<failing_seq>-?\d+) PG status: last enqueued work: (?P<last_enqueued>-?\d+), last completed work: (?P<last_completed>-?\d+)",
         samples=('[E0724 13:05:29.307629539 ProcessGroupNCCL.cpp:2049] [PG ID 0 PG GUID 0(default_pg) Rank 3]  failure detected by watchdog at work sequence id: 7219 PG status: last enqueued work: 7219, last completed work: 7218',)),
    Kind("work_update", "progress", r"NCCL Work update periodically: last enqueued NCCL work: (?P<last_enqueued>-?\d+), last completed NCCL work: (?P<last_completed>-?\d+)",
         samples=('[I0724 13:05:29.307629539 ProcessGroupNCCL.cpp:2200] [PG ID 2 PG GUID 5(EXPERT_MODEL_PARALLEL_GROUP) Rank 1] NCCL Work update periodically: last enqueued NCCL work: 88, last completed NCCL work: 88.',)),
    Kind("dump_signal", "progress", r"Received a dump signal (?:due to a collective timeout )?from\s+(?:rank (?P<detector_rank>\d+)|this local rank).*?Last enqueued NCCL work: (?P<last_enqueued>-?\d+), last completed NCCL work: (?P<last_completed>-?\d+)",
         samples=(
             "[E0724 13:05:30.1 ProcessGroupNCCL.cpp:1600] [PG ID 0 PG GUID 0(default_pg) Rank 17] Received a dump signal due to a collective timeout from  rank 3 and we will try our best to dump the debug info. Last enqueued NCCL work: 7218, last completed NCCL work: 7218.This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across ranks, the order of collectives is not same for all ranks or the scheduled collective, for some reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as network errors or bugs in the communications library (e.g. NCCL), etc.",
             '[E0724 13:05:30.1 ProcessGroupNCCL.cpp:1600] [PG ID 0 PG GUID 0(default_pg) Rank 3] Received a dump signal due to a collective timeout from this local rank and we will try our best to dump the debug info. Last enqueued NCCL work: 7219, last completed NCCL work: 7218.',)),
    Kind("heartbeat_timeout", "events", r"Heartbeat monitor timed out",
         samples=('[E1019 01:04:03.356947152 ProcessGroupNCCL.cpp:1413] [PG 3 Rank 0] Heartbeat monitor timed out! Process will be terminated after dumping debug info. workMetaList_.size()=121',)),
    Kind("heartbeat_timeout", "events", r"First PG on this rank that detected no heartbeat",
         samples=('[E1019 01:04:03.357615073 ProcessGroupNCCL.cpp:1375] [PG 3 Rank 7] First PG on this rank that detected no heartbeat of its watchdog.',)),
    Kind("watchdog_stuck", "events", r"watchdog got stuck for (?P<stuck_s>\d+) seconds",
         samples=("[F1019 01:14:03.356851194 ProcessGroupNCCL.cpp:1224] [PG 3 Rank 2] [PG 3 Rank 2] ProcessGroupNCCL's watchdog got stuck for 600 seconds without making progress in monitoring enqueued collectives.",)),
    # TORCH_NCCL_ENABLE_MONITORING=0: the monitor logs what it would have done (PyTorch prints no
    # space between "process" and "after").
    Kind("watchdog_stuck", "events", r"monitor thread is disabled, but would have terminated",
         samples=("[E1019 01:14:03.357002190 ProcessGroupNCCL.cpp:1488] [PG ID 0 PG GUID 0(default_pg) Rank 2] "
                  "ProcessGroupNCCL monitor thread is disabled, but would have terminated the processafter "
                  "attempting to dump debug info, due to ProcessGroupNCCL watchdog hang.",)),
    Kind("watchdog_exception", "events", r"(?:Process group|NCCL) watchdog thread terminated with exception: (?P<detail>.*)",
         samples=('[I ProcessGroupNCCL.cpp:854] [Rank 0] NCCL watchdog thread terminated with exception: traceMap[thisSeq][myRank].second == kEventStart INTERNAL ASSERT FAILED',)),
    Kind("teardown", "events", r"Some NCCL operations have failed or timed out|we are taking the entire process down",
         samples=(
             '[E ProcessGroupNCCL.cpp:916] [Rank 3] Some NCCL operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.',
             '[E ProcessGroupNCCL.cpp:922] [Rank 3] To avoid data inconsistency, we are taking the entire process down.',)),
    Kind("fr_dump", "events", r"Observed flight recorder dump signal|preparing to dump debug info|Finished flight recorder|Finished writing NCCLPG debug info|Terminating the process after attempting to dump|Dump signal received through pipe",
         samples=(
             '[E0724 13:05:31.1 ProcessGroupNCCL.cpp:1700] [PG ID 0 PG GUID 0(default_pg) Rank 3] Observed flight recorder dump signal from another rank via TCPStore.',
             '[E0724 13:05:31.1 ProcessGroupNCCL.cpp:1701] [PG ID 0 PG GUID 0(default_pg) Rank 3] ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1',
             '[E0724 13:05:32.1 ProcessGroupNCCL.cpp:1702] [PG ID 0 PG GUID 0(default_pg) Rank 3] Finished flight recorder successfully. Output can be analyzed using the fr_trace script.',
             '[F0724 13:06:32.1 ProcessGroupNCCL.cpp:1703] [PG ID 0 PG GUID 0(default_pg) Rank 3] Terminating the process after attempting to dump debug info, due to collective timeout or exception.',)),
    Kind("store_error", "events", r"Failed to check the \"should dump\" flag|Failed to get exception dump flag|\[c10d\] (?:recvValue|sendBytes|recvBytes) failed|waitForInput: (?:poll|socket)|DistStoreError|remote error detected from rank",
         samples=(
             '[W112 01:48:44.277417495 ProcessGroupNCCL.cpp:1771] [PG ID 0 PG GUID 0 Rank 2] Failed to check the "should dump" flag on TCPStore, (maybe TCPStore server has shut down too early), with error: Broken pipe',
             '[W112 01:48:44.275482640 TCPStore.cpp:106] [c10d] sendBytes failed on SocketImpl(fd=83, addr=[localhost]:38648, remote=[localhost]:38381): Broken pipe',)),
    Kind("cpp_frames", "events", r"^Exception raised from \S+ at |^frame #\d+: ",
         samples=(
             'Exception raised from sendBytes at /pytorch/torch/csrc/distributed/c10d/Utils.hpp:653 (most recent call first):',
             'frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x96 (0x7f3a1c9e3446 in /usr/lib/python3/dist-packages/torch/lib/libc10.so)',)),
    Kind("terminate", "events", r"^terminate called after throwing an instance of '(?P<detail>[^']*)'",
         samples=(
             "terminate called after throwing an instance of 'c10::DistBackendError'",
             "terminate called after throwing an instance of 'gloo::EnforceNotMet'",
             "terminate called after throwing an instance of 'std::runtime_error'",
             "terminate called after throwing an instance of 'int'",)),
    Kind("terminate", "events", r"^terminate called (?P<detail>without an active exception)",
         samples=('terminate called without an active exception',)),
    Kind("terminate", "events", r"^\s*what\(\):\s+(?P<detail>.*)",
         samples=(
             '  what():  [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog thread terminated with exception',
             "  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 2048 vs 1024. Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?",
             '  what():  injected std::runtime_error from a worker thread',)),
    Kind("nccl_error", "events", r"NCCL error(?: in: \S+,)?:? (?P<detail>.*?), NCCL version (?P<nccl_version>[\w.+]+)",
         samples=('torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1251, internal error - please report this issue to the NCCL developers, NCCL version 2.18.6',)),
    Kind("nccl_error", "events", r"^nccl\w*Error: |^Unknown NCCL error!|^Last error:\s*$",
         samples=(
             'ncclInternalError: Internal check failed.',
             'Last error:',)),
    Kind("nccl_error", "events", r"NCCL communicator was aborted on rank (?P<detail>\d+)",
         samples=('RuntimeError: NCCL communicator was aborted on rank 3.',)),
    Kind("cuda_error", "events", r"CUDA error: (?P<detail>.*)",
         samples=('RuntimeError: CUDA error: an illegal memory access was encountered',)),
    Kind("cuda_error", "events", r"^CUDA kernel errors might be asynchronously reported|^For debugging consider passing CUDA_LAUNCH_BLOCKING=1|^Compile with `TORCH_USE_CUDA_DSA`",
         samples=(
             'CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.',
             'For debugging consider passing CUDA_LAUNCH_BLOCKING=1',
             'Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.',)),
    Kind("fingerprint_mismatch", "events", r"Detected mismatch between collectives on ranks",
         samples=('RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, TensorShape=[195812480], TensorDtypes=BFloat16), but Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=3104, OpType=ALLREDUCE, TensorShape=[51123456], TensorDtypes=BFloat16).',)),
    # 2023+ DETAIL suffix, on its own line when the message is printed with its newlines/tabs.
    Kind("fingerprint_diff", "events", r"Collectives differ in the following aspects|^\s*(?:Op type|Sequence number|Tensor Tensor shapes|Tensor Tensor dtypes|Tensor Tensor device types|Tensor shapes|Tensor dtypes|Tensor device types):\s*(?P<detail>\S.*vs\s*\S.*)$",
         samples=(
             'Collectives differ in the following aspects: \tOp type: ALLREDUCEvs REDUCE',
             '\tTensor Tensor shapes: 195812480vs 51123456',)),
    Kind("ddp_model_mismatch", "events", r"DDP expects same model across all ranks(?P<detail>.*)",
         samples=('RuntimeError: DDP expects same model across all ranks, but Rank 3 has 51 params, while rank 0 has inconsistent 0 params.',)),
    Kind("failed_collective_stack", "events", r"Stack trace of the failed collective(?P<detail> not found)?",
         samples=('[E0724 13:05:29.1 ProcessGroupNCCL.cpp:2049] [PG ID 0 PG GUID 0(default_pg) Rank 3] Stack trace of the failed collective not found, potentially because FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE to a non-zero value.',)),
    Kind("watchdog_stuck", "events", r"Could not acquire GIL within \d+ ms|Dumping c\+\+ stacktraces|Finished c\+\+ stacktraces dump|slept for \d+ because we want to wait longer",
         samples=('[E0724 13:05:29.1 ProcessGroupNCCL.cpp:1400] [PG ID 0 PG GUID 0(default_pg) Rank 3] Could not acquire GIL within 300 ms on exit, possible GIL induced hang',)),
    Kind("desync_report", "events", r"^\s*- \[\d+\] Timeout at collective: \w+, #\d+|lagging ranks|lagging/dead/mismatched ranks|^\s*#\d+ (?:started|finished) ranks:|^\s*\[[\d, ]+\] (?:started|finished) \w+|joined but didn't finish collective|didn't join collective",
         samples=(
             '\t - [0] Timeout at collective: _REDUCE_SCATTER_BASE, #330',
             '\t - To our best knowledge, ranks [3, 5] are the lagging ranks that caused this timeout. They never joined any collectives',
             '           #330 started ranks:',
             '             [1] started _REDUCE_SCATTER_BASE',
             '             [0] finished _REDUCE_SCATTER_BASE',)),
    Kind("monitored_barrier", "events", r"failed to pass monitoredBarrier",
         samples=('RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms',)),
    Kind("store_barrier", "events", r"(?:Waiting in|Timed out initializing process group in|Completed) store[- ]based barrier|Added key: store_based_barrier_key",
         samples=(
             'Waiting in store based barrier to initialize process group for rank: 0, key: store_based_barrier_key:1 (world_size=4, worker_count=1, timeout=0:30:00)',
             'Timed out initializing process group in store-based barrier on rank: 0, for key: store_based_barrier_key:1 (world_size=4, worker_count=1, timeout=0:30:00)',)),
    Kind("unique_id_store", "events", r"is setting up NCCL communicator and retrieving ncclUniqueId",
         samples=("torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId from [0] via c10d key-value store by key '0', but store->get('0') got error: Socket Timeout",)),
    Kind("env_banner", "settings", r"(?:HeartbeatMonitor|PGNCCL Watchdog|ProcessGroupNCCL) environments: (?P<detail>.*)",
         samples=(
             '[I0724 08:00:10.1 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 3] HeartbeatMonitor environments: TORCH_NCCL_ENABLE_MONITORING (Whether to kill program when no watchdog heartbeat detected): 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: 15000, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: 480, TORCH_NCCL_COORD_CHECK_MILSEC: 1000',
             '[I0724 08:00:10.1 ProcessGroupNCCL.cpp:901] [PG ID 0 PG GUID 0(default_pg) Rank 3] PGNCCL Watchdog environments: TORCH_NCCL_RETHROW_CUDA_ERRORS: 1, TORCH_NCCL_PROPAGATE_ERROR: 0, TORCH_NCCL_DESYNC_DEBUG: 0',)),
    Kind("pg_options", "settings", r"ProcessGroupNCCL initialization options: (?P<detail>.*)",
         samples=('[I0724 08:00:06.555185662 ProcessGroupNCCL.cpp:1014] [PG ID 0 PG GUID 0 Rank 11] ProcessGroupNCCL initialization options: size: 40, global rank: 11, TIMEOUT(ms): 600000, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: 0, SPLIT_COLOR: 0, PG Name: 0',)),
    Kind("traceback", "events", r"^Traceback \(most recent call last\):|^\s*File \"[^\"]*\", line \d+",
         samples=(
             'Traceback (most recent call last):',
             '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',)),
    Kind("exception", "events", r"^(?P<exc_type>(?:[A-Za-z_][\w]*\.)*[A-Z]\w*(?:Error|Exception|Interrupt))(?:: (?P<detail>.*))?$",
         samples=('torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.26 GiB. GPU 3 has a total capacity of 95.00 GiB of which 0.2 GiB is free.',)),
]
SAMPLE_LINES = samples_of(KINDS)


def _join_wrapped(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.Series]:
    """Join lines that a human wrapped mid-message; return the frame and the swallowed line_nos."""
    # Wrapped lines are rare: one cheap pass finds whether any line starts one (`\s*$` trims what
    # `strip_chars_end` below trims) before the shifted copies of every line are made.
    if not df.select((pl.col("text").str.contains(rx(r"operation timeout:\s*$"))
                      | pl.col("text").str.ends_with(" detected")).any()).item():
        return df, df["line_no"].clear()
    nxt = pl.col("text").shift(-1)
    wrapped = (
        pl.col("text").str.strip_chars_end().str.ends_with("operation timeout:")
        & nxt.str.starts_with("WorkNCCL(")
    ) | (
        pl.col("text").str.ends_with(" detected") & nxt.str.starts_with("by watchdog at work")
    )
    if "input_id" in df.columns:  # batched over many inputs: never join the last line of one to the next
        wrapped = wrapped & (pl.col("input_id") == pl.col("input_id").shift(-1))
    df = df.with_columns(_wrapped=wrapped.fill_null(False))
    swallowed = df.filter(pl.col("_wrapped").shift(1).fill_null(False))["line_no"]
    df = df.with_columns(
        text=pl.when(pl.col("_wrapped"))
        .then(pl.concat_str([pl.col("text").str.strip_chars_end(), pl.lit(" "), nxt]))
        .otherwise(pl.col("text"))
    ).filter(~pl.col("_wrapped").shift(1).fill_null(False)).drop("_wrapped")
    return df, swallowed


def _last_error(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """PyTorch's NCCL error text ends with ``Last error:`` and, on the next line, NCCL's last WARN
    message (``ncclGetLastError``, docs/formats/pytorch-failures.md 4.1): (line_no of the ``Last
    error:`` line, the carried text as ``detail``, ``next_line``). The carried line is consumed."""
    marker = pl.col("text").str.contains(rx(r"(?:^|\s)Last error:\s*$"))
    if not df.select(marker.any()).item():   # the usual case: skip the shifted copy of every line
        return df, pl.DataFrame(schema={"line_no": df.schema["line_no"], "detail": pl.String,
                                        "next_line": df.schema["line_no"]})
    nxt = pl.col("text").shift(-1)
    same = (pl.col("input_id") == pl.col("input_id").shift(-1)) if "input_id" in df.columns else pl.lit(True)
    rows = df.with_columns(_m=marker, detail=nxt.str.strip_chars(), next_line=pl.col("line_no").shift(-1),
                           _same=same.fill_null(False)).filter(pl.col("_m") & pl.col("_same") & (pl.col("detail") != ""))
    return df, rows.select("line_no", "detail", "next_line")


def _header_fields(h: pl.Expr) -> dict[str, pl.Expr]:
    """The columns a captured glog header (struct of GLOG's groups) gives."""
    field = h.struct.field
    return {"level": field("sev"), "ts": glog_timestamp(field("mmdd"), field("hms"), field("frac")),
            "src_file": field("src")}


def _pg_fields(p: pl.Expr) -> dict[str, pl.Expr]:
    """The columns a captured PG prefix (struct of _PG's groups) gives; an empty GUID is none."""
    field = p.struct.field
    return {"pg_id": to_int(pl.coalesce(field("pg_id"), field("pg_id_old"))),
            "pg_guid": pl.when(field("pg_guid") == "").then(None).otherwise(field("pg_guid")),
            "pg_desc": pl.coalesce(field("pg_desc"), field("pg_desc_old")),
            "pg_rank": to_int(field("pg_rank"))}


def _split_header(df: pl.DataFrame) -> pl.DataFrame:
    """Pull the glog header and the (first) PG prefix off each message."""
    df = df.with_columns(_h=pl.col("text").str.extract_groups(rx(_HEADER)))
    df = df.with_columns(
        **_header_fields(pl.col("_h")),
        msg=pl.col("text").str.replace(rx(_HEADER), "").str.strip_chars_start(),
    ).drop("_h")
    # `terminate ...` + `  what():  [PG ... Rank r] <message>`: the exception's message keeps its
    # PG prefix (and its `[Rank N] Watchdog caught ... WorkNCCL(...)`), as the logged line does.
    df = df.with_columns(_p=pl.col("msg").str.extract_groups(rx(rf"^(?:what\(\):\s+)?{_PG}")))
    return df.with_columns(
        **_pg_fields(pl.col("_p")),
        # A repeated prefix (`[PG 3 Rank 2] [PG 3 Rank 2] ...`) and a double space are both seen.
        msg=pl.col("msg").str.replace(rx(rf"^(what\(\):\s+)?(?:{_PG}\s*)+"), "${1}"),
    ).drop("_p")


# Most c10d lines of a long job are ProcessGroupNCCL's periodic work update, in one shape:
#   [I0724 12:37:01.750000123 ProcessGroupNCCL.cpp:2401] [PG ID 2 PG GUID 5(EXPERT_GROUP) Rank 0] NCCL Work update periodically: last enqueued NCCL work: 99730, last completed NCCL work: 99730.
# _WORK_UPDATE_LINE reads that whole line (any era's PG prefix) in one anchored pass. Its
# classes are narrower than _HEADER's and _PG's, but wherever it matches, they capture the same
# groups, and the message (fixed text and two integers) holds none of the literals of the kinds
# before work_update: such a line is a work_update, without _split_header, _classify and the
# work_update pattern's second pass. Anything else (a non-ASCII PG name, a glog pid, two spaces,
# a repeated PG prefix, text after the numbers) goes the general way, as before. The PG
# alternatives share their `PG ` so that the regex stays one-pass (a fast capture engine).
_WORK_UPDATE_LINE = (
    r"^\[(?P<sev>[IWEF])(?:(?P<mmdd>[0-9]{3,4}) (?P<hms>[0-9]{2}:[0-9]{2}:[0-9]{2})(?:\.(?P<frac>[0-9]+))?)? "
    r"(?P<src>[A-Za-z_][A-Za-z0-9_./-]*):[0-9]+\] "
    r"\[(?:PG (?:ID (?P<pg_id>[0-9]+) PG GUID (?P<pg_guid>[A-Za-z0-9_.:-]*)(?:\((?P<pg_desc>[A-Za-z0-9_.:-]*)\))? "
    r"|(?P<pg_id_old>[0-9]+) (?:\((?P<pg_desc_old>[A-Za-z0-9_.:-]*)\) )?))?Rank (?P<pg_rank>-?[0-9]+)\] "
    r"(?P<msg>NCCL Work update periodically: last enqueued NCCL work: (?P<last_enqueued>-?[0-9]+), "
    r"last completed NCCL work: (?P<last_completed>-?[0-9]+)\.?)$"
)
_WORK_UPDATE_PATTERN = next(i for i, kind in enumerate(KINDS) if kind.name == "work_update")


def _work_updates(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Split off the work-update lines of the common shape, parsed (the columns _split_header
    gives, kind and pattern as _classify gives them, last_enqueued and last_completed as text);
    return them and the other lines, untouched."""
    df = df.with_columns(_h=pl.col("text").str.extract_groups(rx(_WORK_UPDATE_LINE)))
    fast = pl.col("_h").struct.field("sev").is_not_null()
    groups = pl.col("_h").struct.field
    updates = df.filter(fast).with_columns(
        **_header_fields(pl.col("_h")), msg=groups("msg"), **_pg_fields(pl.col("_h")),
        kind=pl.lit("work_update"), _pattern=pl.lit(_WORK_UPDATE_PATTERN, dtype=pl.Int32),
        last_enqueued=groups("last_enqueued"), last_completed=groups("last_completed"),
    ).drop("_h")
    return updates, df.filter(~fast).drop("_h")


COLLECTIVES_SCHEMA = SHARED["collectives"].columns_of(NAME)
PROGRESS_SCHEMA = SHARED["progress"].columns_of(NAME)
EVENTS_SCHEMA = SHARED["events"].columns_of(NAME)
SETTINGS_SCHEMA = {"line_no": pl.UInt32, "source": pl.String, "key": pl.String, "value": pl.String}


def _classify(df: pl.DataFrame) -> pl.DataFrame:
    """Give each message the first matching (kind, table, pattern index), in one query: a call
    per pattern cost more than the patterns' work (most lines of a long job, the work updates,
    are taken before, by ``_work_updates``)."""
    possible = possible_kinds(df, "msg", KINDS)     # the others' patterns are not even compiled
    first = first_kind([pl.col("msg").str.contains(rx(kind.pattern)) if i in possible else None
                        for i, kind in enumerate(KINDS)])
    return (df.lazy().with_columns(_pattern=first).filter(pl.col("_pattern").is_not_null())
            .select(*df.columns, kind=kind_name(pl.col("_pattern"), KINDS), _pattern="_pattern")
            .sort("line_no", maintain_order=True).collect(engine="in-memory"))   # the input's order


def _rows(df: pl.DataFrame, table: str, schema: dict, parsed: pl.DataFrame | None = None) -> pl.DataFrame:
    """Extract the named groups of each message's pattern into the table's columns; ``parsed``:
    rows of the table whose groups are already columns (the work updates)."""
    parts = [] if parsed is None or parsed.is_empty() else [conform(parsed, schema).lazy()]
    present = set(df["_pattern"].unique().to_list())   # a filter per pattern of KINDS costs more than the work
    for i, kind in enumerate(KINDS):
        if kind.table != table or i not in present:
            continue
        sub = df.lazy().filter(pl.col("_pattern") == i).with_columns(
            pl.col("msg").str.extract_groups(rx(kind.pattern)).struct.unnest()).with_columns(message=pl.col("msg"))
        parts.append(conform_lazy(sub, schema))
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.concat(parts).sort("line_no").collect(engine="in-memory")    # one call for every kind


def _fingerprints(events: pl.DataFrame) -> pl.DataFrame:
    """One collectives row per CollectiveFingerPrint a DETAIL mismatch message names."""
    mism = events.filter(pl.col("kind") == "fingerprint_mismatch")
    if mism.is_empty():
        return pl.DataFrame(schema=COLLECTIVES_SCHEMA)
    pattern = (r"Rank (\d+) is running (?:inconsistent )?collective: CollectiveFingerPrint\("
               r"(?:SequenceNumber=(\d+),? ?)?OpType=(\w+)(?:, TensorShape=\[([^\]]*)\])?")
    rows = mism.select(
        "line_no", "ts", "level", "src_file", "pg_id", "pg_guid", "pg_desc",
        pl.col("message").str.extract_all(rx(pattern)).alias("fp"),
    ).explode("fp").drop_nulls("fp")
    fp = pl.col("fp")
    shape = fp.str.extract(rx(pattern), 4).str.replace_all(rx(r"\s"), "")
    return rows.select(
        "line_no", "ts", "level", "src_file", "pg_id", "pg_guid", "pg_desc",
        pg_rank=to_int(fp.str.extract(rx(pattern), 1)),
        kind=pl.lit("fingerprint"),
        seq=to_int(fp.str.extract(rx(pattern), 2)),
        op=fp.str.extract(rx(pattern), 3),
        # A single-dimension shape is the element count; multi-dimensional shapes multiply.
        numel_in=shape.str.split(",").list.eval(to_int(pl.element())).list.eval(
            pl.element().product()).list.first(),
        numel_out=pl.lit(None, dtype=pl.Int64),
        timeout_ms=pl.lit(None, dtype=pl.Int64),
        ran_for_ms=pl.lit(None, dtype=pl.Int64),
    ).cast(COLLECTIVES_SCHEMA)


# A settings pair `K: v`: its key, then its value after its last colon. ``TIMEOUT(ms): 600000``
# keeps its unit as an option; an environment banner's `TORCH_NCCL_ENABLE_MONITORING (Whether to
# kill ...): 1` drops the explanation. One pattern a pair instead of one for the key and one for
# the value, each tried on its own kind of line only (10,000 ranks: 490,000 pairs, 0.8 -> 0.55 s).
_VALUE = r"(?:.*:)?\s*([^:]*)$"
_PAIRS = (("pg_options", "c10d-pg-options", "pg.", r"^\s*([^:]+?)\s*:" + _VALUE),
          ("env_banner", "c10d-env", "", r"^\s*([^:(]+?)\s*(?:\([^)]*\))?\s*:" + _VALUE))


def _settings(df: pl.DataFrame) -> pl.DataFrame:
    """``... environments: K: v, ...`` banners, and each PG's ``initialization options: size: 40,
    global rank: 11, TIMEOUT(ms): 36000000, ...`` (keys prefixed ``pg.``; the PG is on the line)."""
    banners = df.filter(pl.col("kind").is_in([kind for kind, *_ in _PAIRS]))
    if banners.is_empty():
        return pl.DataFrame(schema=SETTINGS_SCHEMA)
    pairs = banners.select(
        "line_no", "kind",
        pair=pl.col("msg").str.extract(r"(?:environments|initialization options): (.*)$", 1).str.split(", "),
    ).with_row_index("_banner").explode("pair")
    parts = [pairs.filter(pl.col("kind") == kind).select(
        "_banner", "line_no", source=pl.lit(source), _kv=pl.col("pair").str.extract_groups(rx(pattern))
    ).unnest("_kv").select("_banner", "line_no", "source", key=pl.concat_str([pl.lit(prefix), pl.col("1")]),
                           value=pl.col("2")) for kind, source, prefix, pattern in _PAIRS]
    # the banners' order, each banner's pairs in theirs
    return pl.concat(parts).sort("_banner", maintain_order=True).drop("_banner").drop_nulls("key").cast(SETTINGS_SCHEMA)


def _as_events(df: pl.DataFrame) -> pl.DataFrame:
    """Classified messages of the other tables as events rows (the message, no detail)."""
    return df.lazy().with_columns(message=pl.col("msg"), exc_type=pl.lit(None, dtype=pl.String),
                                  detail=pl.lit(None, dtype=pl.String)).select(list(EVENTS_SCHEMA)).cast(EVENTS_SCHEMA) \
        .collect(engine="in-memory")


def parse(lines: pl.DataFrame) -> ParseResult:
    # Join wrapped lines first: the second half of a wrapped line holds none of the literals.
    df, swallowed = _join_wrapped(lines.select("line_no", "text", *[c for c in ("input_id",) if c in lines.columns]))
    df, carried = _last_error(df)
    df = df.filter(pl.col("text").str.contains_any(_LITERALS))
    if df.is_empty():
        return ParseResult()
    # The common shape of the commonest line in one pass; every other line as it always was.
    updates, df = _work_updates(df)
    df = _classify(_split_header(df))
    collectives = _rows(df, "collectives", COLLECTIVES_SCHEMA)
    progress = _rows(df, "progress", PROGRESS_SCHEMA, parsed=updates)
    events = _rows(df, "events", EVENTS_SCHEMA)
    if not carried.is_empty():
        # `Last error:` carries NCCL's last WARN text on the next line: it is the event's detail.
        events = events.join(carried.select("line_no", _carried="detail"), on="line_no", how="left").with_columns(
            detail=pl.coalesce("_carried", "detail")).drop("_carried")
        swallowed = pl.concat([swallowed.cast(pl.UInt32), carried["next_line"].cast(pl.UInt32)])
    fingerprints = _fingerprints(events)
    if not fingerprints.is_empty():
        collectives = pl.concat([collectives, fingerprints]).sort("line_no")
    settings = _settings(df)
    # Every classified message is an event too, so the timeline sees timeouts and status lines.
    all_events = pl.concat([
        events,
        _as_events(df.filter(pl.col("kind").is_in(["watchdog_timeout", "blocking_wait_timeout", "pg_status",
                                                   "dump_signal", "env_banner", "pg_options", "work_update"]))),
        _as_events(updates),
    ]).sort("line_no")
    consumed = pl.concat([consumed_of(df, updates), swallowed.cast(pl.UInt32)]).unique()
    return ParseResult(
        tables={"collectives": collectives, "progress": progress, "events": all_events,
                "settings": settings},
        consumed=consumed,
    )
