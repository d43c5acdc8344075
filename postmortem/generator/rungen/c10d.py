"""ProcessGroupNCCL (c10d) lines: the watchdog family, one method per message kind.

Formats: ``docs/formats/pytorch-failures.md`` sections 1-3 (envelope, WorkNCCL descriptor, watchdog
stages) and the public logs quoted there. A c10d line is, from the outside in::

    [rank3]:[E0724 13:05:29.307629539 ProcessGroupNCCL.cpp:607] [PG ID 0 PG GUID 0(default_pg) Rank 3] <message>

``[rankN]:`` is the global rank (>= 2.3); the glog header has no date before 2.4; the PG prefix
changed form three times; ``[Rank N]`` inside a message is the rank *within the process group*.
The launcher prefix (srun label, ``[defaultN]:``) is added later by ``layout``.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from .base import Clock, lib_address
from .eras import Era

DUMP_HINT = (
    "This is most likely caused by incorrect usages of collectives, e.g., wrong sizes used across "
    "ranks, the order of collectives is not same for all ranks or the scheduled collective, for some "
    "reason, didn't run. Additionally, this can be caused by GIL deadlock or other reasons such as "
    "network errors or bugs in the communications library (e.g. NCCL), etc."
)


@dataclass(frozen=True)
class PG:
    """A process group as the logs name it."""

    uid: int          # "PG ID": the process-local counter (0 = default PG)
    guid: str         # "PG GUID": the group name, the Flight Recorder pg_config key
    desc: str         # the description set by the framework
    size: int


@dataclass(frozen=True)
class Work:
    """One collective as the watchdog describes it (WorkNCCL, 2.0+ form with Numel)."""

    seq: int
    op: str
    numel_in: int
    numel_out: int
    timeout_ms: int

    def describe(self) -> str:
        return (f"WorkNCCL(SeqNum={self.seq}, OpType={self.op}, NumelIn={self.numel_in}, "
                f"NumelOut={self.numel_out}, Timeout(ms)={self.timeout_ms})")


class C10dLog:
    """The c10d lines of one rank in one era."""

    def __init__(self, era: Era, clock: Clock, rank: int, rng: random.Random):
        self.era, self.clock, self.rank = era, clock, rank
        # Each process maps libc10/libtorch_cuda at its own address (ASLR), reused for all frames.
        self._libs = {name: lib_address(rng) for name in ("c10", "torch_cuda", "stdcxx", "libc")}
        self._block_t, self._block_n = -1.0, 0

    # -- envelope -------------------------------------------------------------------------

    def header(self, severity: str, t: float, kind: str) -> str:
        """``[rank3]:[E0724 13:05:29.307629539 ProcessGroupNCCL.cpp:607] `` for this era."""
        where = f"ProcessGroupNCCL.cpp:{self.era.cpp.get(kind, 1000)}"
        stamp = f"{severity}{self.clock.glog(self._stamp(t))} {where}" if self.era.glog_date else f"{severity} {where}"
        rank = f"[rank{self.rank}]:" if self.era.rank_prefix else ""
        return f"{rank}[{stamp}] "

    def _stamp(self, t: float) -> float:
        """Lines logged one after another at "the same" instant are some microseconds apart."""
        if t == self._block_t:
            self._block_n += 1
        else:
            self._block_t, self._block_n = t, 0
        n = self._block_n
        return t + n * 1.7e-5 + (n * 7919 % 13) * 1e-6

    def pg_prefix(self, pg: PG, pg_rank: int, with_desc: bool = True) -> str:
        """The ``logPrefix()`` of a process group (section 1, layer 4)."""
        form = self.era.pg_form
        if form == "none":
            return f"[Rank {pg_rank}] "
        if form == "pg":
            return f"[PG {pg.uid} Rank {pg_rank}] "
        if form == "pg-desc":
            desc = f" ({pg.desc})" if with_desc else ""
            return f"[PG {pg.uid}{desc} Rank {pg_rank}] "
        desc = f"({pg.desc})" if with_desc else ""
        return f"[PG ID {pg.uid} PG GUID {pg.guid}{desc} Rank {pg_rank}] "

    def traceback(self, text: str) -> str:
        """Python tracebacks get the global-rank prefix (with a space) from 2.3 on."""
        prefix = f"[rank{self.rank}]: " if self.era.rank_prefix else ""
        return "\n".join(prefix + line for line in text.split("\n"))

    # -- detection ------------------------------------------------------------------------

    def timeout_message(self, work: Work, pg_rank: int, ran_for_ms: int) -> str:
        # WorkNCCL's own prefix is "[Rank N] " in every era (public 2.1-2.9 logs agree).
        return (f"[Rank {pg_rank}] Watchdog caught collective operation timeout: {work.describe()} "
                f"ran for {ran_for_ms} milliseconds before timing out.")

    def watchdog_timeout(self, t: float, work: Work, pg_rank: int, ran_for_ms: int) -> str:
        return self.header("E", t, "timeout") + self.timeout_message(work, pg_rank, ran_for_ms)

    def pg_status(self, t: float, pg: PG, pg_rank: int, seq: int, enqueued: int, completed: int) -> str | None:
        """The PG status line in its era's wording (section 3.2); 2.1 printed none."""
        prefix = self.header("E", t, "status") + self.pg_prefix(pg, pg_rank)
        wording = self.era.status
        if wording == "timeout-at":
            return (f"{prefix}Timeout at NCCL work: {seq}, last enqueued NCCL work: {enqueued}, "
                    f"last completed NCCL work: {completed}.")
        if wording == "exception":
            return (f"{prefix}Exception (either an error or timeout) detected by watchdog at work: {seq}, "
                    f"last enqueued NCCL work: {enqueued}, last completed NCCL work: {completed}.")
        if wording == "failure-detected":
            # logPrefix() ends in a space and the message starts with one: two spaces (real logs).
            return (f"{prefix} failure detected by watchdog at work sequence id: {seq} PG status: "
                    f"last enqueued work: {enqueued}, last completed work: {completed}")
        return None

    def failed_collective_stack(self, t: float, frames: list[tuple[str, str]]) -> str | None:
        """``Stack trace of the failed collective`` (>= 2.6): frames when Flight Recorder is on."""
        if self.era.stack_trace is None:
            return None
        head = self.header("E", t, "stack")
        if self.era.stack_trace == "not-found":
            return (head + "Stack trace of the failed collective not found, potentially because "
                    "FlightRecorder is disabled. You can enable it by setting TORCH_NCCL_TRACE_BUFFER_SIZE "
                    "to a non-zero value.")
        body = [f"#{i} {fn} from {where}" for i, (fn, where) in enumerate(frames)]
        return "\n".join([head + "Stack trace of the failed collective:", *body, ""])

    def first_pg_to_signal(self, t: float, pg: PG, pg_rank: int) -> str | None:
        if not self.era.first_pg_signal:
            return None
        return self.header("E", t, "first_pg") + self.pg_prefix(pg, pg_rank) + "First PG on this rank to signal dumping."

    # -- dump coordination (section 3.5) --------------------------------------------------

    def observed_dump_signal(self, t: float, pg0: PG) -> str | None:
        if not self.era.observed_signal:
            return None
        return (self.header("E", t, "observed") + self.pg_prefix(pg0, self.rank)
                + "Observed flight recorder dump signal from another rank via TCPStore.")

    def received_dump_signal(self, t: float, pg0: PG, from_rank: int | None, enqueued: int, completed: int) -> str:
        """PG 0's monitor reports the *receiving* rank's own PG-0 progress; ``from_rank`` None = itself."""
        source = "this local rank" if from_rank is None else f" rank {from_rank}"   # sic: two spaces
        return (self.header("E", t, "received") + self.pg_prefix(pg0, self.rank)
                + f"Received a dump signal due to a collective timeout from {source} and we will try our "
                f"best to dump the debug info. Last enqueued NCCL work: {enqueued}, last completed NCCL "
                f"work: {completed}.{DUMP_HINT}{self.era.dump_msg_tail}")

    def preparing_dump(self, t: float, pg0: PG) -> str | None:
        if self.era.preparing_suffix is None:
            return None
        return (self.header("E", t, "preparing") + self.pg_prefix(pg0, self.rank)
                + f"ProcessGroupNCCL preparing to dump debug info. Include stack trace: 1{self.era.preparing_suffix}")

    # -- teardown (section 3.4) -----------------------------------------------------------

    def teardown(self, t: float, work: Work, pg: PG, pg_rank: int, ran_for_ms: int) -> list[str]:
        """From "Some NCCL operations have failed" to the C++ ``what()`` of the abort."""
        rank_tag = f"[Rank {pg_rank}] " if self.era.teardown_rank_prefix else ""
        owner = f"[Rank {pg_rank}] " if self.era.pg_form == "none" else self.pg_prefix(pg, pg_rank)
        reason = f"{owner}{self.era.terminated_wording} with exception: {self.timeout_message(work, pg_rank, ran_for_ms)}"
        inner = self._cpp_trace("checkTimeout", self.era.cpp["raise"], self._check_timeout_frames())
        outer = self._cpp_trace(self.era.outer_frame_fn, self.era.cpp["outer"], self._outer_frames())
        return [
            self.header("E", t, "some_ops") + rank_tag + "Some NCCL operations have failed or timed out. Due to "
            "the asynchronous nature of CUDA kernels, subsequent GPU operations might run on corrupted/incomplete data.",
            self.header("E", t, "take_down") + rank_tag + "To avoid data inconsistency, we are taking the entire process down.",
            self.header("E", t, "terminated") + reason + "\n" + inner + "\n",
            "terminate called after throwing an instance of 'c10::DistBackendError'",
            "  what():  " + reason + "\n" + inner + "\n\n" + outer + "\n",
        ]

    def _source(self) -> str:
        prefix = "/pytorch" if self.era.python == "3.12" else ".."
        return f"{prefix}/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp"

    def _lib(self, name: str) -> str:
        torch_lib = f"/usr/local/lib/python{self.era.python}/dist-packages/torch/lib"
        return {"c10": f"{torch_lib}/libc10.so", "torch_cuda": f"{torch_lib}/libtorch_cuda.so",
                "stdcxx": "/lib/x86_64-linux-gnu/libstdc++.so.6", "libc": "/lib/x86_64-linux-gnu/libc.so.6"}[name]

    def _frame(self, index: int, symbol: str, offset: int, lib: str) -> str:
        address = self._libs[lib] + offset
        # Named symbols show a small offset into the function; anonymous ones the offset into the library.
        shown = offset if symbol == "<unknown function>" else offset & 0xFFF
        return f"frame #{index}: {symbol} + {shown:#x} (0x{address:x} in {self._lib(lib)})"

    def _check_timeout_frames(self) -> list[tuple[str, int, str]]:
        symbols = [(self.era.error_frame0, 0x96, "c10"),
                   ("c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::chrono::duration<long, "
                    "std::ratio<1l, 1000l> > >)", 0x1D2D2, "torch_cuda")]
        offsets = [0x11A2_233, 0x11A3_10C]
        symbols += [(name, off, "torch_cuda") for name, off in zip(self.era.watchdog_frames, offsets)]
        return symbols + self._thread_start_frames()

    def _outer_frames(self) -> list[tuple[str, int, str]]:
        return [(self.era.error_frame0, 0x96, "c10"), ("<unknown function>", 0x6915EB, "torch_cuda"),
                *self._thread_start_frames()]

    @staticmethod
    def _thread_start_frames() -> list[tuple[str, int, str]]:
        return [("<unknown function>", 0xDC253, "stdcxx"), ("<unknown function>", 0x94AC3, "libc"),
                ("<unknown function>", 0x126850, "libc")]

    def _cpp_trace(self, function: str, line: int, frames: list[tuple[str, int, str]]) -> str:
        head = f"Exception raised from {function} at {self._source()}:{line} (most recent call first):"
        return "\n".join([head] + [self._frame(i, sym, off, lib) for i, (sym, off, lib) in enumerate(frames)])

    # -- INFO-level lines (TORCH_CPP_LOG_LEVEL=INFO) ----------------------------------------

    def work_update(self, t: float, pg: PG, pg_rank: int, enqueued: int, completed: int) -> str:
        return (self.header("I", t, "update") + self.pg_prefix(pg, pg_rank)
                + f"NCCL Work update periodically: last enqueued NCCL work: {enqueued}, "
                f"last completed NCCL work: {completed}.")

    def init_banners(self, t: float, pg: PG, pg_rank: int, timeout_ms: int, nccl_version: str,
                     async_error_handling: int, trace_buffer: int) -> list[str]:
        """Settings printed when a PG is created (section 3.7); PG 0 also prints the monitor ones."""
        if self.era.env_banners is None:
            return []
        # Printed before the description is attached: "[PG ID 0 PG GUID 0 Rank 1]" (nccl.md 3.1).
        prefix = self.pg_prefix(pg, pg_rank, with_desc=False)
        split = "0" if pg.uid == 0 else "1"
        lines = [self.header("I", t, "options") + prefix
                 + f"ProcessGroupNCCL initialization options: size: {pg.size}, global rank: {self.rank}, "
                 f"TIMEOUT(ms): {timeout_ms}, USE_HIGH_PRIORITY_STREAM: 0, SPLIT_FROM: {split}, "
                 f"SPLIT_COLOR: 0, PG Name: {pg.guid}"]
        heartbeat, dump_wait = self.era.heartbeat_s, self.era.dump_wait_ms
        lines.append(self.header("I", t, "env") + prefix
                     + f"ProcessGroupNCCL environments: NCCL version: {nccl_version}, TORCH_NCCL_ASYNC_ERROR_HANDLING: "
                     f"{async_error_handling}, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: "
                     f"{dump_wait}, TORCH_NCCL_DESYNC_DEBUG: 0, TORCH_NCCL_ENABLE_TIMING: 0, TORCH_NCCL_BLOCKING_WAIT: 0, "
                     f"TORCH_DISTRIBUTED_DEBUG: OFF, TORCH_NCCL_ENABLE_MONITORING: 1, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: "
                     f"{heartbeat}, TORCH_NCCL_TRACE_BUFFER_SIZE: {trace_buffer}, TORCH_NCCL_COORD_CHECK_MILSEC: 1000, "
                     f"TORCH_NCCL_NAN_CHECK: 0")
        if self.era.env_banners == "monitor" and pg.uid == 0:
            lines.append(self.header("I", t, "monitor_env") + prefix
                         + "HeartbeatMonitor environments: TORCH_NCCL_ENABLE_MONITORING (Whether to kill program when "
                         f"no watchdog heartbeat detected): 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 1, "
                         f"TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC: {dump_wait}, TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC: "
                         f"{heartbeat}, TORCH_NCCL_COORD_CHECK_MILSEC: 1000, TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN: 1")
            lines.append(self.header("I", t, "monitor_env") + prefix
                         + "PGNCCL Watchdog environments: TORCH_NCCL_RETHROW_CUDA_ERRORS: 1, "
                         "TORCH_NCCL_PROPAGATE_ERROR: 0, TORCH_NCCL_DESYNC_DEBUG: 0")
        return lines


# -- other crash kinds for the earlier attempts (RunSpec.crash_kind; issue 4) -----------------------

CRASH_KINDS = ("oom", "cuda-ecc", "illegal-address", "device-assert", "gloo-closed")
_CUDA_TRAILER = [
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be incorrect.",
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
]


def crash_text(kind: str, era_name: str) -> tuple[list[str], str, list[str]]:
    """(lines printed before the traceback, the exception line, lines after it) for a crash of
    ``kind`` (``docs/formats/pytorch-failures.md`` sections 5 and 6.3). ``oom`` is the story's own."""
    error = "torch.AcceleratorError" if era_name >= "2.8" else "RuntimeError"
    if kind == "cuda-ecc":
        return [], f"{error}: CUDA error: uncorrectable ECC error encountered", list(_CUDA_TRAILER)
    if kind == "illegal-address":
        return [], f"{error}: CUDA error: an illegal memory access was encountered", list(_CUDA_TRAILER)
    if kind == "device-assert":
        before = [f"/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [{b},0,0], thread: "
                  f"[{t},0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed."
                  for b, t in ((117, 32), (117, 33))]
        return before, f"{error}: CUDA error: device-side assert triggered", list(_CUDA_TRAILER)
    if kind == "gloo-closed":
        return [], ("RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer "
                    "[10.0.0.2]:45123"), []
    raise ValueError(f"unknown crash kind {kind!r}")
