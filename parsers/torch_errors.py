"""PyTorch failures that are not c10d watchdog lines: OOMs, CUDA faults, Python tracebacks,
faulthandler dumps, Gloo errors, rendezvous / TCPStore errors, fatal signals.

References: ``docs/formats/pytorch-failures.md`` sections 5-7 and ``docs/formats/training-logs.md``
section 7 (OOM text by version). ``postmortem.parsers.c10d`` already classifies many of these lines one
by one (``exception``, ``traceback``, ``cuda_error`` events); this parser adds what needs more
than one line or a normalised value:

* ``memory`` (label ``cuda_oom``): every CUDA OOM wording, sizes normalised to MiB --
  ``requested_mib``, ``capacity_mib``, ``free_mib``, ``allocated_mib``, ``reserved_mib``,
  ``reserved_unallocated_mib``, ``private_pools_mib``, ``process_in_use_mib``, ``gpu``
  (process-local CUDA index) and ``oom_format``:

  - ``<=1.3``: ``Tried to allocate S (GPU d; T total capacity; A already allocated; F free; C cached)``
  - ``1.4-2.0``: ``... ; R reserved in total by PyTorch)`` (RuntimeError, torch.cuda.OutOfMemoryError)
  - ``2.1+``: ``Tried to allocate S. GPU d has a total capac(i)ty of T of which F is free.
    [Process P has X memory in use. ]*[Including non-PyTorch memory, this process has X memory
    in use. ]Of the allocated memory A is allocated by PyTorch, [with P allocated in private
    pools (e.g., CUDA Graphs), ]and U is reserved by PyTorch but unallocated.`` (2.1's
    ``capacty`` typo, 2.5's ``torch.OutOfMemoryError`` alias)
  - ``raw``: ``CUDA error: out of memory`` / NCCL ``Cuda failure 'out of memory'`` (no sizes)

* ``events``:

  - ``cuda_oom`` per OOM message, with the sizes it states as columns (``oom_size_columns``:
    ``oom_requested_mib``, ``oom_capacity_mib``, ``oom_free_mib``, ``oom_allocated_mib``,
    ``oom_unallocated_mib``), so no reader re-parses the text;
  - ``cuda_fault`` per CUDA error line, ``detail`` = class (``device_side_assert``,
    ``illegal_memory_access``, ``ecc``, ``launch_failure``, ``misaligned_address``,
    ``illegal_instruction``, ``out_of_memory``, ``launch_timeout``, ``other``) and the kernel
    assertion lines (``...cu:92: ...: block: [0,0,0], thread: [0,0,0] Assertion `...` failed.``);
  - ``python_traceback``: one row per ``Traceback (most recent call last):`` block (followed
    per process stream), at the header line, with ``exc_type``, ``detail`` (the message),
    ``exc_line_no`` and ``frames``; its frames go to ``stacks`` (``source`` ``traceback``,
    ``depth`` 0 = innermost, ``dump_index`` = the traceback's header line);
  - ``faulthandler``: ``Fatal Python error: <what>`` (``Aborted`` after a C++ ``terminate``);
    the ``Thread 0x... (most recent call first):`` / ``Current thread 0x...`` / ``Stack (most
    recent call first):`` blocks and their ``  File "f", line N in func`` frames go to
    ``stacks`` (``source`` ``faulthandler``, ``thread_state`` ``current`` for the crashing
    thread); the closing ``Extension modules: ... (total: N)`` line is consumed;
  - ``gloo_error``: ``[.../gloo/transport/tcp/pair.cc:N] <detail>`` (Connection closed by
    peer, Connection reset), ``Timed out waiting Nms for send|recv operation``, ``Gloo
    connectFullMesh failed``, gloo's own ``ERROR failed to connect`` and ``[enforce fail at
    ...]`` lines; ``cause`` says which (``peer_closed``, ``peer_reset``, ``recv_timeout``,
    ``send_timeout``, ``connect_full_mesh``, ``connect_failed``, ``enforce``, ``other``),
    ``peer`` the remote ``ip:port`` a pair names, ``value`` a timeout's milliseconds;
  - ``gloo_size_mismatch``: gloo refusing a message larger than the buffer posted for it
    (``[enforce fail at .../pair.cc:N] op.preamble.length <= op.nbytes. 2048 vs 1024. Received
    data size doesn't match expected size``, usually the ``what():`` of a ``terminate called
    after throwing an instance of 'gloo::EnforceNotMet'``): ranks called the collective with
    different sizes; ``value`` = the size received (bytes);
  - ``op`` (tracebacks, faulthandler dumps and the gloo events they raised): the collective
    the stack is in, from its innermost ``torch/distributed/distributed_c10d.py`` frame, named
    as c10d's OpType (``dist.all_reduce`` -> ``ALLREDUCE``, ``init_process_group`` -> ``INIT``).
    A gloo event gets its traceback's (its line is the traceback's ``exc_line_no``) or, for a
    ``what():`` line, that of the faulthandler dump right after it in the same stream. The
    frames themselves are ``stacks`` rows whose ``dump_index`` is the traceback's header line
    (``python_traceback.line_no``) or the dump's ``Fatal Python error`` line;
  - ``rendezvous_error``: ``RendezvousTimeoutError`` / ``RendezvousClosedError`` /
    ``RendezvousConnectionError`` / ``RendezvousError``, ``DistStoreError: Timed out after N
    seconds waiting for clients. J/N clients joined.``, ``DistNetworkError`` (EADDRINUSE...);
  - ``fr_trace`` / ``fr_trace_detail``: the ``fr_trace`` analyzer's verdict lines (``Not all
    ranks joining collective, sequence number: N`` -- ``value`` holds N --, ``Input/output
    mismatch ...``, ``... has errors``, undecidable, no errors, too many mismatches) and the
    ``internal record id: / group info: / missing ranks: / error msg: ...`` lines under them;
  - ``signal``: glog's ``*** SIGSEGV (@0x0) received by PID P (TID T) ...; stack trace: ***``
    and the shell's ``Segmentation fault (core dumped)`` / ``Aborted (core dumped)`` / ``Bus error``.
"""

from __future__ import annotations

import polars as pl

from postmortem.parsers.ascii_text import rx
from postmortem.parsers.base import (GLOG, ParseResult, collect_each, conform, conform_lazy, consumed_of,
                                     glog_timestamp, to_int)
from postmortem.parsers.kinds import Kind, first_kind, kind_name, possible_kinds, samples_of
from postmortem.parsers.lines import any_literal, with_stream_holding
from postmortem.parsers.tables import SHARED

NAME = "torch_errors"
# Columns that hold line numbers besides ``line_no`` (a traceback's exception line; a stack's
# dump id is its first line): analyzer.ingest maps them back when it parses many inputs at once.
LINE_NUMBER_COLUMNS = {"events": ("exc_line_no",), "stacks": ("dump_index",)}

SAMPLE_LINES = [
    "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; 9.82 GiB already allocated; 30.56 MiB free; 1.01 GiB cached)",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB (GPU 0; 31.74 GiB total capacity; 28.82 GiB already allocated; 577.12 MiB free; 29.97 GiB reserved in total by PyTorch) If reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
    "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacty of 79.15 GiB of which 1.06 GiB is free. Process 12345 has 78.08 GiB memory in use. Of the allocated memory 75.20 GiB is allocated by PyTorch, and 1.38 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.26 GiB. GPU 3 has a total capacity of 95.00 GiB of which 204.81 MiB is free. Including non-PyTorch memory, this process has 94.79 GiB memory in use. Of the allocated memory 90.11 GiB is allocated by PyTorch, with 1.50 GiB allocated in private pools (e.g., CUDA Graphs), and 2.43 GiB is reserved by PyTorch but unallocated. If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
    "/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [0,0,0], thread: [0,0,0] Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed.",
    "Traceback (most recent call last):",
    '  File "/usr/lib/python3.10/runpy.py", line 196, in _run_module_as_main',
    "    return _run_code(code, main_globals, None,",
    "           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^",
    "ValueError: boom",
    "Fatal Python error: Segmentation fault",
    "Thread 0x00007f3a1c9e3700 (most recent call first):",
    '  File "/usr/lib/python3.10/threading.py", line 324 in wait',
    "Current thread 0x00007f3a2d1f4740 (most recent call first):",
    '  File "/workspace/train.py", line 88 in forward',
    "Stack (most recent call first):",
    # real torch 2.13 output (tests/torch_runs: a rank aborted mid all_reduce)
    "Fatal Python error: Aborted",
    "Thread 0x00007f91af218b80 (most recent call first):",
    '  File "/tmp/torchenv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce',
    "Extension modules: numpy._core._multiarray_umath, numpy.linalg._umath_linalg, torch._C, torch._C._dynamo.autograd_compiler, torch._C._dynamo.eval_frame, torch._C._dynamo.guards, torch._C._dynamo.utils, torch._C._fft, torch._C._linalg, torch._C._nested, torch._C._nn, torch._C._sparse, torch._C._special (total: 13)",
]

_LITERALS = ["out of memory", "CUDA error", "Assertion `", "Traceback (most recent call last)", '  File "',
             "Fatal Python error", "most recent call first", "Extension modules:", "gloo", "Gloo", "Timed out waiting",
             "Rendezvous", "DistStoreError", "DistNetworkError", "clients joined", "***", "core dumped",
             "Segmentation fault", "Bus error", "Cuda failure", "Aborted", "Killed", "Illegal instruction",
             "Floating point exception", "sequence number:", "collective entry", "Too many mismatches",
             "record id:", "group info:", "collective:", "missing ranks:", "input sizes:", "output sizes:",
             "world size:", "expected ranks:", "collective state:", "error msg:", "collective stack trace:"]

MEMORY_SCHEMA = SHARED["memory"].columns_of(NAME)
EVENTS_SCHEMA = SHARED["events"].columns_of(NAME)
STACKS_SCHEMA = SHARED["stacks"].columns_of(NAME)

_SIZE = r"[\d.]+ (?:[KMGT]iB|bytes|B)"
_OOM_OLD = (
    rf"CUDA out of memory\. Tried to allocate (?P<req>{_SIZE}) \(GPU (?P<gpu>\d+); (?P<total>{_SIZE}) total capacity; "
    rf"(?P<alloc>{_SIZE}) already allocated; (?P<free>{_SIZE}) free; "
    rf"(?:(?P<reserved>{_SIZE}) reserved in total by PyTorch|(?P<cached>{_SIZE}) cached)"
)
_OOM_NEW = (
    rf"CUDA out of memory\. Tried to allocate (?P<req>{_SIZE})\. GPU (?P<gpu>\d+) has a total capac(?P<typo>i?)ty of "
    rf"(?P<total>{_SIZE}) of which (?P<free>{_SIZE}) is free\."
    rf"(?: Process (?P<pid>\d+) has (?P<proc>{_SIZE}) memory in use\.)*"
    rf"(?: Including non-PyTorch memory, this process has (?P<inuse>{_SIZE}) memory in use\.)?"
    rf"(?: Of the allocated memory (?P<alloc>{_SIZE}) is allocated by PyTorch,"
    rf"(?: with (?P<pools>{_SIZE}) allocated in private pools \(e\.g\., CUDA Graphs\),)?"
    rf" and (?P<unalloc>{_SIZE}) is reserved by PyTorch but unallocated\.)?"
)
# NCCL's allocation failure states only the request (``Failed to CUDA calloc 6291456 bytes``).
_CALLOC = r"Failed to CUDA calloc (\d+) bytes"
_OOM_RAW = r"CUDA error: out of memory|Cuda failure '?out of memory'?|CUDA out of memory"
_EXC_HEAD = r"^\s*(?P<exc>(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Warning))(?::\s*(?P<msg>.*))?$"

# The class of a ``cuda_fault`` event (its ``detail``) by the CUDA error's text: first match wins.
CUDA_FAULT_CLASSES: list[Kind] = [
    Kind("device_side_assert", "events", r"device-side assert",
         samples=("RuntimeError: CUDA error: device-side assert triggered",)),
    Kind("illegal_memory_access", "events", r"illegal memory access",
         samples=("torch.AcceleratorError: CUDA error: an illegal memory access was encountered",)),
    Kind("ecc", "events", r"ECC error",
         samples=("RuntimeError: CUDA error: uncorrectable ECC error encountered",)),
    Kind("launch_failure", "events", r"unspecified launch failure|launch failure",
         samples=("RuntimeError: CUDA error: unspecified launch failure",)),
    Kind("misaligned_address", "events", r"misaligned address",
         samples=("RuntimeError: CUDA error: misaligned address",)),
    Kind("illegal_instruction", "events", r"illegal instruction",
         samples=("RuntimeError: CUDA error: an illegal instruction was encountered",)),
    Kind("out_of_memory", "events", r"out of memory",
         samples=("RuntimeError: CUDA error: out of memory",)),
    Kind("launch_timeout", "events", r"launch timed out",
         samples=("RuntimeError: CUDA error: the launch timed out and was terminated",)),
]

# One-line events, first match wins; group 1 (``d``) of the pattern is the event's detail.
SINGLE_KINDS: list[Kind] = [
    # gloo refusing a message larger than the buffer posted for it: the ranks called the
    # collective with different sizes (a desync, not a consequence of another failure).
    Kind("gloo_size_mismatch", "events", r"gloo/[\w/]+\.(?:cc|h):\d+\]\s*(?P<d>.*Received data size doesn't match expected size.*)$",
         samples=("  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 2048 vs 1024. Received data size doesn't match expected size. Is there a distributed collective mismatch in your code?",)),
    Kind("gloo_error", "events", r"Gloo connectFullMesh failed with\s*(?:\[[^\]]*gloo/[\w/]+\.(?:cc|h):\d+\]\s*)?(?P<d>.*)$",
         samples=(
             "RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
             "[E1203 08:11:58.255772279 ProcessGroupGloo.cpp:67] Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:28590$2",
             "RuntimeError: Gloo connectFullMesh failed with [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:152] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.0.1]:28590$2",
         )),
    Kind("gloo_error", "events", r"gloo/[\w/]+\.(?:cc|h):\d+\]\s*(?P<d>.*)$",
         samples=(
             "[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.1.2.3]:23456",
             "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.1.2.3]:41072",
             "RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms for recv operation to complete",
             "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:55211. This is typically caused by a remote worker crashing. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
             "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:11666: Connection reset by peer. This is typically caused by a remote worker hanging or bugs in the application. Check the logs of the remote worker before reporting an error. GLHF! 🏖️",
             "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 6000ms for recv operation to complete",
             "RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] Timed out waiting 6000ms for send operation to complete",
             "[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/debug_logger.cc:9] ERROR failed to connect, willRetry=0, retry=4, retryLimit=3, rank=2, size=4, local=[127.0.0.1]:18589, remote=[127.0.0.1]:28590$2, error=SO_ERROR: Connection refused, remote=",
             "RuntimeError: [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/device.cc:84] ifa != nullptr. Unable to find address for: nonexistent0",
         )),
    Kind("gloo_error", "events", r"(?P<d>Timed out waiting \d+ms for (?:send|recv)(?: operation)?)",
         samples=("RuntimeError: Timed out waiting 12000ms for send operation to complete",)),
    # the message cut after "failed" (a wrapped or truncated line)
    Kind("gloo_error", "events", r"Gloo connectFullMesh failed(?: with)?\s*(?P<d>.*)$",
         samples=("RuntimeError: Gloo connectFullMesh failed",)),
    Kind("rendezvous_error", "events", r"(?P<d>Rendezvous(?:Timeout|Closed|Connection|State)?Error)\b",
         samples=(
             "torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError",
             "torch.distributed.elastic.rendezvous.api.RendezvousClosedError",
             "torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has failed. See inner exception for details.",
         )),
    Kind("rendezvous_error", "events", r"(?P<d>Timed out after \d+ seconds waiting for clients\. \d+/\d+ clients joined)",
         samples=("torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",)),
    Kind("rendezvous_error", "events", r"DistNetworkError: (?P<d>.*)$",
         samples=("torch.distributed.DistNetworkError: The server socket has failed to listen on any local network address. port: 29500, useIpv6: 0, code: -98, name: EADDRINUSE, message: address already in use",)),
    Kind("signal", "events", r"^\*\*\* (?P<d>SIG[A-Z]+) \(@0x[0-9a-f]+\) received by PID \d+",
         samples=("*** SIGSEGV (@0x0) received by PID 1734 (TID 0x7f3a2d1f4740) from PID 0; stack trace: ***",)),
    # torch.distributed.flight_recorder.fr_trace output (pytorch-failures.md 9.5): the verdict
    # lines (value = the sequence number) and the block of fields printed under each.
    Kind("fr_trace", "events", r"(?P<d>Not all ranks joining collective)[,:] sequence number: \d+",
         samples=("Not all ranks joining collective, sequence number: 7219",)),
    Kind("fr_trace", "events", r"(?P<d>Input/output mismatch) in the collective sequence number: \d+",
         samples=("Input/output mismatch in the collective sequence number: 12",)),
    Kind("fr_trace", "events", r"^Collective sequence number: \d+ (?P<d>has errors)",
         samples=("Collective sequence number: 12 has errors",)),
    Kind("fr_trace", "events", r"(?P<d>We cannot decide what's wrong with this collective entry) because we missed FR dumps",
         samples=("We cannot decide what's wrong with this collective entry because we missed FR dumps from ranks ({3}) so we don't have enough information. If you want to debug further use -j to dump all raw trace",)),
    Kind("fr_trace", "events", r"(?P<d>No errors found for this collective entry), There could be some other reasons",
         samples=("No errors found for this collective entry, There could be some other reasons why we see collective timeout.",)),
    Kind("fr_trace", "events", r"(?P<d>Too many mismatches for process_group) \S+: aborting",
         samples=("Too many mismatches for process_group 0: aborting",)),
    Kind("fr_trace_detail", "events", r"^\s*(?P<d>internal record id|group info|collective|missing ranks|input sizes|output sizes|world size|expected ranks|collective state|error msg|collective stack trace):(?:\s|$)",
         samples=(
             "internal record id: 11058",
             "group info: 0:default_pg",
             "collective: nccl:_all_gather_base",
             "missing ranks: {17}",
             "input sizes: [[8069120]]",
             "output sizes: [[322764800]]",
             "world size: 40",
             "expected ranks: {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39}",
             "collective state: scheduled",
             "error msg: Culprit rank 17; Error type: COLLECTIVE_TYPE_MISMATCH, Expected collective type: 'all_reduce' does not match found collective type: 'broadcast'",
             "collective stack trace:",
         )),
    # The shell's report of a dead child: `Segmentation fault (core dumped)`, or bash's
    # `bash: line 1:  1734 Aborted  (core dumped) python train.py`; not faulthandler's header.
    Kind("signal", "events", r"^(?P<d>Segmentation fault|Aborted|Bus error|Illegal instruction|Floating point exception)(?:\s+\(core dumped\))?\s*$",
         samples=(
             "Segmentation fault (core dumped)",
             "Aborted (core dumped)",
         )),
    Kind("signal", "events", r"line \d+:\s+\d+ (?P<d>Segmentation fault|Aborted|Bus error|Illegal instruction|Floating point exception|Killed)\b",
         samples=("/var/spool/slurmd/job4242/slurm_script: line 12:  1734 Killed                  python train.py",)),
]
SAMPLE_LINES += samples_of(CUDA_FAULT_CLASSES) + samples_of(SINGLE_KINDS)


def _mib(size: pl.Expr) -> pl.Expr:
    """``786.00 MiB`` / ``31.74 GiB`` / ``0 bytes`` -> MiB (1024-based, as c10's format_size)."""
    number = size.str.extract(rx(r"^([\d.]+)"), 1).cast(pl.Float64, strict=False)
    unit = size.str.extract(rx(r" (\S+)$"), 1)
    factor = (pl.when(unit == "KiB").then(1 / 1024).when(unit == "MiB").then(1.0).when(unit == "GiB").then(1024.0)
              .when(unit == "TiB").then(1024.0 * 1024).when(unit.is_in(["bytes", "B"])).then(1 / (1024 * 1024))
              .otherwise(None))
    return number * factor


def oom_size_columns(text: pl.Expr) -> dict[str, pl.Expr]:
    """The sizes (MiB) an OOM message states, as ``events`` columns (null where it states none):
    the request, the card's capacity, what was free, what PyTorch had allocated, and what it held
    reserved but unallocated (<= 1.3's ``cached``, 1.4-2.0's reserved minus allocated). A message
    without PyTorch's wording may still state its request as NCCL's ``calloc`` byte count."""
    old, new = text.str.extract_groups(rx(_OOM_OLD)), text.str.extract_groups(rx(_OOM_NEW))

    def size(field: str, *structs: pl.Expr) -> pl.Expr:
        return _mib(pl.coalesce([s.struct.field(field) for s in structs]))
    calloc_mib = text.str.extract(rx(_CALLOC), 1).cast(pl.Float64, strict=False) / (1024 * 1024)
    return {
        "oom_requested_mib": pl.coalesce(size("req", new, old), calloc_mib),
        "oom_capacity_mib": size("total", new, old),
        "oom_free_mib": size("free", new, old),
        "oom_allocated_mib": size("alloc", new, old),
        "oom_unallocated_mib": pl.coalesce(size("unalloc", new), size("cached", old),
                                           size("reserved", old) - size("alloc", old)),
    }


def _ooms(df: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    sub = df.filter(pl.col("text").str.contains("out of memory", literal=True)
                    | pl.col("text").str.contains("Cuda failure", literal=True))
    sub = sub.filter(pl.col("text").str.contains(rx(_OOM_RAW)))
    if sub.is_empty():
        return pl.DataFrame(schema=MEMORY_SCHEMA), pl.DataFrame(schema=EVENTS_SCHEMA)
    old = pl.col("text").str.extract_groups(rx(_OOM_OLD))
    new = pl.col("text").str.extract_groups(rx(_OOM_NEW))
    sub = sub.with_columns(_o=old, _n=new)
    o = lambda f: pl.col("_o").struct.field(f)
    n = lambda f: pl.col("_n").struct.field(f)
    is_old, is_new = o("req").is_not_null(), n("req").is_not_null()
    mem = sub.select(
        "line_no",
        label=pl.lit("cuda_oom"), framework=pl.lit("torch"), source_unit=pl.lit("MiB"),
        oom_format=pl.when(is_old & o("cached").is_not_null()).then(pl.lit("<=1.3"))
        .when(is_old).then(pl.lit("1.4-2.0"))
        .when(is_new & (n("typo") == "")).then(pl.lit("2.1"))
        .when(is_new).then(pl.lit("2.2+"))
        .otherwise(pl.lit("raw")),
        gpu=to_int(pl.coalesce(o("gpu"), n("gpu"))),
        requested_mib=_mib(pl.coalesce(o("req"), n("req"))),
        capacity_mib=_mib(pl.coalesce(o("total"), n("total"))),
        free_mib=_mib(pl.coalesce(o("free"), n("free"))),
        allocated_mib=_mib(pl.coalesce(o("alloc"), n("alloc"))),
        # 1.4-2.0 print reserved; <= 1.3's "cached" and >= 2.1's "reserved by PyTorch but
        # unallocated" are the cached-but-unused part U: reserved = A + U.
        reserved_mib=pl.coalesce(_mib(o("reserved")), _mib(o("alloc")) + _mib(o("cached")),
                                 _mib(n("alloc")) + _mib(n("unalloc"))),
        reserved_unallocated_mib=pl.coalesce(_mib(n("unalloc")), _mib(o("cached")),
                                             _mib(o("reserved")) - _mib(o("alloc"))),
        private_pools_mib=_mib(n("pools")),
        process_in_use_mib=_mib(pl.coalesce(n("inuse"), n("proc"))),
        oom_pid=to_int(n("pid")),
    )
    events = sub.select(
        "line_no", kind=pl.lit("cuda_oom"),
        exc_type=pl.col("text").str.extract(rx(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)):"), 1),
        detail=pl.col("text").str.extract(r"((?:CUDA|Cuda).*)$", 1),
        message=pl.col("text"),
        value=_mib(pl.coalesce(o("req"), n("req"))),
        **oom_size_columns(pl.col("text")),
    )
    return conform(mem, MEMORY_SCHEMA), conform(events, EVENTS_SCHEMA)


def _cuda_faults(df: pl.DataFrame) -> pl.DataFrame:
    err = pl.col("text").str.contains(r"CUDA error: ") & ~pl.col("text").str.contains("CUDA error: out of memory", literal=True)
    assertion = pl.col("text").str.contains(rx(r"\.cuh?:\d+: .*block: \[[\d,]+\], thread: \[[\d,]+\] Assertion `"))
    sub = df.filter(err | assertion)
    if sub.is_empty():
        return pl.DataFrame(schema=EVENTS_SCHEMA)
    cls = pl.lit("other")
    for kind in reversed(CUDA_FAULT_CLASSES):
        cls = pl.when(pl.col("text").str.contains(rx(kind.pattern))).then(pl.lit(kind.name)).otherwise(cls)
    cls = pl.when(assertion).then(pl.lit("device_side_assert")).otherwise(cls)
    out = sub.select(
        "line_no", kind=pl.lit("cuda_fault"),
        exc_type=pl.col("text").str.extract(rx(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)):"), 1),
        detail=cls, message=pl.col("text"),
    )
    return conform(out, EVENTS_SCHEMA)


_GLOO_CAUSES = [
    ("size_mismatch", "Received data size doesn't match expected size"),
    ("connect_full_mesh", "connectFullMesh failed"),
    ("connect_failed", r"failed to connect|timed out connecting|Connect timeout"),
    ("recv_timeout", r"Timed out waiting \d+ms for recv"),
    ("send_timeout", r"Timed out waiting \d+ms for send"),
    ("peer_closed", "Connection closed by peer"),
    ("peer_reset", "Connection reset by peer"),
    ("enforce", r"\[enforce fail at "),
]


# the remote end a gloo pair names: `Connection closed by peer [ip]:port`, `Read error [ip]:port`,
# `remote=[ip]:port` (connect failures)
_PEER = r"(?:by peer|Read error|Write error|remote=) ?\[([^\]]+)\]:(\d+)"


def _gloo_cause(text: pl.Expr) -> pl.Expr:
    """What a gloo line says happened, as one word (``cause`` of gloo events)."""
    out = pl.lit("other")
    for name, pattern in reversed(_GLOO_CAUSES):
        out = pl.when(text.str.contains(rx(pattern))).then(pl.lit(name)).otherwise(out)
    return out


# torch.distributed's Python API -> the OpType name c10d prints in WorkNCCL(...) / Flight Recorder.
_C10D_OPS = {
    "all_reduce": "ALLREDUCE", "all_reduce_coalesced": "ALLREDUCE_COALESCED", "broadcast": "BROADCAST",
    "reduce": "REDUCE", "all_gather": "ALLGATHER", "all_gather_into_tensor": "_ALLGATHER_BASE",
    "_all_gather_base": "_ALLGATHER_BASE", "all_gather_object": "ALLGATHER", "gather": "GATHER",
    "gather_object": "GATHER", "scatter": "SCATTER", "reduce_scatter": "REDUCE_SCATTER",
    "reduce_scatter_tensor": "_REDUCE_SCATTER_BASE", "_reduce_scatter_base": "_REDUCE_SCATTER_BASE",
    "all_to_all": "ALLTOALL", "all_to_all_single": "ALLTOALL_BASE", "barrier": "BARRIER",
    "monitored_barrier": "BARRIER", "send": "SEND", "recv": "RECV", "isend": "SEND", "irecv": "RECV",
    "batch_isend_irecv": "COALESCED", "broadcast_object_list": "BROADCAST",
    "init_process_group": "INIT", "new_group": "INIT", "new_subgroups": "INIT",
}


def _stack_ops(stacks: pl.DataFrame) -> pl.DataFrame:
    """Per stack (``dump_index``, ``thread_id``): the collective its innermost torch.distributed
    frame is in (``op``, named as c10d's OpType), from a ``distributed_c10d.py`` frame."""
    if stacks.is_empty():
        return pl.DataFrame(schema={"dump_index": pl.Int64, "thread_id": pl.String, "thread_state": pl.String,
                                    "op": pl.String})
    c10d = stacks.filter(pl.col("file").fill_null("").str.ends_with("distributed_c10d.py")
                         & pl.col("function").is_in(list(_C10D_OPS)))
    return (c10d.sort("depth").group_by("dump_index", "thread_id", maintain_order=True)
            .agg(pl.col("function").first(), pl.col("thread_state").first())
            .select("dump_index", "thread_id", "thread_state",
                    op=pl.col("function").replace_strict(_C10D_OPS, default=None, return_dtype=pl.String)))


def _ops(events: pl.DataFrame, stacks: pl.DataFrame, st: pl.DataFrame | None) -> pl.DataFrame:
    """``op`` of each traceback (its innermost ``distributed_c10d.py`` frame: ``dist.all_reduce``
    -> ``ALLREDUCE``) and faulthandler dump (the crashing thread's), and of the gloo events its
    collective raised: the traceback's exception line, or the line right before faulthandler's
    ``Fatal Python error`` in the same stream (gloo's ``terminate ... what():`` aborts the process)."""
    ops = _stack_ops(stacks)
    if events.is_empty() or ops.is_empty():
        return events
    # a traceback has one thread; a faulthandler dump prefers the current thread, else the one
    # thread that was in a collective
    per_dump = (ops.with_columns(_cur=(pl.col("thread_state") == "current").fill_null(False))
                .sort("_cur", descending=True).group_by("dump_index", maintain_order=True)
                .agg(op=pl.col("op").first(), _n=pl.col("op").n_unique(), _cur=pl.col("_cur").first())
                .filter(pl.col("_cur") | (pl.col("_n") == 1)).select(pl.col("dump_index").cast(pl.UInt32), "op"))
    events = events.join(per_dump.rename({"dump_index": "line_no", "op": "_op"}), on="line_no", how="left").with_columns(
        op=pl.coalesce("op", pl.when(pl.col("kind").is_in(["python_traceback", "faulthandler"])).then(pl.col("_op")))
    ).drop("_op")
    by_exc = events.filter(pl.col("kind") == "python_traceback").drop_nulls(["exc_line_no", "op"]).select(
        line_no="exc_line_no", _op="op")
    events = events.join(by_exc, on="line_no", how="left").with_columns(
        op=pl.when(pl.col("kind").str.starts_with("gloo")).then(pl.coalesce("op", "_op")).otherwise(pl.col("op"))
    ).drop("_op")
    fatal = events.filter((pl.col("kind") == "faulthandler") & pl.col("op").is_not_null())
    if st is not None and not fatal.is_empty():
        pos = st.select("line_no", "_stream", "_seq")
        gloo = (events.filter(pl.col("kind").str.starts_with("gloo") & pl.col("op").is_null()).select("line_no")
                .join(pos, on="line_no").sort("_seq"))
        fatal = fatal.select("line_no", _fop="op").join(pos, on="line_no").sort("_seq")
        if not gloo.is_empty():
            near = gloo.join_asof(fatal.rename({"line_no": "_fline", "_seq": "_fseq"}), left_on="_seq", right_on="_fseq",
                                  by="_stream", strategy="forward", check_sortedness=False)
            near = near.filter((pl.col("_fseq") - pl.col("_seq")) <= 2).select("line_no", _op="_fop")
            events = events.join(near, on="line_no", how="left").with_columns(
                op=pl.coalesce("op", "_op")).drop("_op")
    return events


def _glog_ts(text: pl.Expr) -> pl.Expr:
    """The time of a line with a glog header (``[E1203 08:38:47.093852657 ProcessGroupGloo.cpp:67]``):
    without it, a restart's gloo errors would have no time to place them in their attempt."""
    h = text.str.extract_groups(rx(rf"^\[{GLOG}"))
    return glog_timestamp(h.struct.field("mmdd"), h.struct.field("hms"), h.struct.field("frac"))


def _singles(df: pl.DataFrame) -> pl.DataFrame:
    """One events row per line a ``SINGLE_KINDS`` pattern matches (the first that does), in the
    kinds' order, then the lines' order. One query: a filter and a select per kind cost more than
    the patterns' work on a small input."""
    possible = possible_kinds(df, "text", SINGLE_KINDS)     # the others' patterns are not even compiled
    at = first_kind([pl.col("text").str.contains(rx(single.pattern)) if i in possible else None
                     for i, single in enumerate(SINGLE_KINDS)])
    which = pl.col("_kind")
    gloo = [i for i, single in enumerate(SINGLE_KINDS) if single.name.startswith("gloo")]
    rows = df.lazy().with_columns(_kind=at).filter(which.is_not_null()).sort("_kind", maintain_order=True).select(
        "line_no",
        kind=kind_name(which, SINGLE_KINDS),
        exc_type=pl.col("text").str.extract(rx(r"^\s*((?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception)):?"), 1),
        detail=pl.coalesce([pl.when(which == i).then(pl.col("text").str.extract(rx(single.pattern), 1))
                            for i, single in enumerate(SINGLE_KINDS) if i in possible]
                           or [pl.lit(None, dtype=pl.String)]),
        message=pl.col("text"),
        value=pl.coalesce(pl.col("text").str.extract(rx(r"Timed out waiting (\d+)ms"), 1),
                          pl.col("text").str.extract(rx(r"sequence number: (\d+)"), 1),
                          pl.col("text").str.extract(rx(r"^Collective sequence number: (\d+)"), 1),
                          pl.col("text").str.extract(rx(r"\. (\d+) vs \d+\. Received data size"), 1))
        .cast(pl.Float64, strict=False),
        cause=pl.when(which.is_in(gloo)).then(_gloo_cause(pl.col("text"))),
        peer=pl.col("text").str.extract(rx(_PEER), 1) + ":" + pl.col("text").str.extract(rx(_PEER), 2),
        ts=_glog_ts(pl.col("text")),
    )
    return conform(rows.collect(engine="in-memory"), EVENTS_SCHEMA)


_TB_HEAD = r"^\s*Traceback \(most recent call last\):\s*$"
_TB_FRAME = r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+)(?:, in (?P<func>.*?))?\s*$'
_FH_FATAL = r"^\s*Fatal Python error: (?P<what>.*?)\s*$"
_FH_MODULES = r"^\s*Extension modules: .*\(total: \d+\)\s*$"
_FH_THREAD = r"^\s*(?:(?P<current>Current thread)|Thread) (?P<tid>0x[0-9a-fA-F]+) \(most recent call first\):\s*$|^\s*Stack \(most recent call first\):\s*$"
_FH_FRAME = r'^\s+File "(?P<file>[^"]*)", line (?P<line>\d+) in (?P<func>.*?)\s*$'


def _tracebacks(st: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    """Python tracebacks followed per stream: header, indented lines (frames, code, carets),
    then the first unindented line, which is the exception (``Type: message``)."""
    empty = (pl.DataFrame(schema=EVENTS_SCHEMA), pl.DataFrame(schema=STACKS_SCHEMA), pl.Series("line_no", [], dtype=pl.UInt32))
    if not st["text"].str.contains("Traceback (most recent call last)", literal=True).any():
        return empty
    # one plan, run in one call: a dozen eager steps cost more than their work on a small input
    df = st.lazy().sort("_stream", "_seq").with_columns(
        _head=pl.col("text").str.contains(rx(_TB_HEAD)),
        _indent=pl.col("text").str.contains(rx(r"^\s+\S")),
    )
    # A segment starts at a header or at any unindented line; header segments are tracebacks.
    df = df.with_columns(_seg=(pl.col("_head") | ~pl.col("_indent")).cast(pl.Int64).cum_sum().over("_stream"))
    df = df.with_columns(_seg_head=pl.col("_head").first().over("_stream", "_seg"))
    body = df.filter(pl.col("_seg_head"))
    # The exception line: the first line of the next segment, when it is not itself a header.
    nxt = df.with_columns(_prev_tb=pl.col("_seg_head").shift(1).over("_stream").fill_null(False))
    exc = nxt.filter(pl.col("_prev_tb") & ~pl.col("_head") & pl.col("text").str.contains(rx(_EXC_HEAD)))
    exc = exc.with_columns(_seg=pl.col("_seg") - 1).select(
        "_stream", "_seg", exc_line_no="line_no",
        exc_type=pl.col("text").str.extract(rx(_EXC_HEAD), 1), detail=pl.col("text").str.extract(rx(_EXC_HEAD), 2),
        message=pl.col("text").str.strip_chars())
    frames = body.filter(pl.col("text").str.contains(rx(_TB_FRAME))).with_columns(
        pl.col("text").str.extract_groups(rx(_TB_FRAME)).struct.unnest())
    heads = body.filter(pl.col("_head")).select("_stream", "_seg", head_line="line_no")
    frames = frames.join(heads, on=["_stream", "_seg"]).with_columns(
        _n=pl.len().over("_stream", "_seg"), _i=pl.int_range(pl.len()).over("_stream", "_seg"))
    stacks = frames.select(
        "line_no", dump_index=pl.col("head_line").cast(pl.Int64), function=pl.col("func"), file=pl.col("file"),
        file_line=to_int(pl.col("line")), depth=(pl.col("_n") - 1 - pl.col("_i")).cast(pl.Int64),
        source=pl.lit("traceback"))
    counts = frames.group_by("_stream", "_seg").agg(frames=pl.len())
    events = heads.join(exc, on=["_stream", "_seg"], how="left").join(counts, on=["_stream", "_seg"], how="left").select(
        line_no="head_line", kind=pl.lit("python_traceback"), exc_type="exc_type", detail="detail",
        message=pl.coalesce("message", pl.lit("Traceback (most recent call last):")),
        exc_line_no="exc_line_no", frames=pl.col("frames").fill_null(0))
    consumed = pl.concat([body.select("line_no"), exc.select(line_no="exc_line_no")])
    events, stacks, consumed = collect_each([conform_lazy(events, EVENTS_SCHEMA).sort("line_no"),
                                             conform_lazy(stacks, STACKS_SCHEMA).sort("line_no"), consumed])
    return events, stacks, consumed["line_no"]


def _faulthandler(st: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.Series]:
    empty = (pl.DataFrame(schema=EVENTS_SCHEMA), pl.DataFrame(schema=STACKS_SCHEMA), pl.Series("line_no", [], dtype=pl.UInt32))
    if not st["text"].str.contains("most recent call first", literal=True).any() and \
            not st["text"].str.contains("Fatal Python error", literal=True).any():
        return empty
    df = st.sort("_stream", "_seq").with_columns(
        _fatal=pl.col("text").str.contains(rx(_FH_FATAL)), _thread=pl.col("text").str.contains(rx(_FH_THREAD)),
        _frame=pl.col("text").str.contains(rx(_FH_FRAME)))
    df = df.with_columns(
        _fatal_line=pl.when(pl.col("_fatal")).then(pl.col("line_no")).forward_fill().over("_stream"),
        _thread_line=pl.when(pl.col("_thread")).then(pl.col("line_no"))
        .when(~pl.col("_frame")).then(pl.lit(None, dtype=pl.UInt32)).forward_fill().over("_stream"),
    )
    # forward_fill above also carries across non-frame lines; a frame belongs to a thread only
    # when every line between them is a frame: recompute with a segment id.
    df = df.with_columns(_seg=(~pl.col("_frame")).cast(pl.Int64).cum_sum().over("_stream"))
    df = df.with_columns(_seg_thread=pl.col("_thread").first().over("_stream", "_seg"),
                         _seg_head=pl.col("line_no").first().over("_stream", "_seg"))
    heads = df.filter(pl.col("_thread")).select(
        "_stream", "_seg", "_fatal_line",
        tid=pl.col("text").str.extract_groups(rx(_FH_THREAD)).struct.field("tid"),
        current=pl.col("text").str.contains(rx(r"^\s*Current thread")))
    frames = df.filter(pl.col("_frame") & pl.col("_seg_thread")).with_columns(
        pl.col("text").str.extract_groups(rx(_FH_FRAME)).struct.unnest())
    frames = frames.drop("_fatal_line").join(heads, on=["_stream", "_seg"])
    stacks = frames.with_columns(_i=pl.int_range(pl.len()).over("_stream", "_seg")).select(
        "line_no", dump_index=pl.col("_fatal_line").cast(pl.Int64), thread_id="tid",
        thread_state=pl.when(pl.col("current")).then(pl.lit("current")).otherwise(pl.lit(None, dtype=pl.String)),
        depth=pl.col("_i").cast(pl.Int64), function="func", file="file", file_line=to_int(pl.col("line")),
        source=pl.lit("faulthandler"))
    fatal = df.filter(pl.col("_fatal")).select(
        "line_no", kind=pl.lit("faulthandler"), detail=pl.col("text").str.extract(rx(_FH_FATAL), 1),
        message=pl.col("text").str.strip_chars())
    nframes = frames.group_by("_fatal_line").agg(frames=pl.len()).rename({"_fatal_line": "line_no"})
    events = fatal.join(nframes, on="line_no", how="left").with_columns(pl.col("frames").fill_null(0))
    # Python >= 3.10 ends the dump with the C extension modules loaded (`(total: N)`)
    modules = df.filter(pl.col("_fatal_line").is_not_null() & pl.col("text").str.contains(rx(_FH_MODULES)))["line_no"]
    consumed = pl.concat([df.filter(pl.col("_fatal") | pl.col("_thread"))["line_no"], frames["line_no"], modules])
    return conform(events, EVENTS_SCHEMA).sort("line_no"), conform(stacks, STACKS_SCHEMA).sort("line_no"), consumed


# The streams _tracebacks, _faulthandler and _ops read (whole: a traceback ends at any line): those
# holding a traceback or dump (their own lines), or a gloo event (_ops places one by its stream
# and position, before a faulthandler dump of the same stream).
_STREAM_MARKS = ["Traceback (most recent call last)", "most recent call first", "Fatal Python error",
                 "gloo", "Gloo", "Timed out waiting"]


def file_gate(text: pl.Expr) -> pl.Expr:
    """A line this parser could start from (``_LITERALS``, which hold ``_STREAM_MARKS``): an input
    without one gives nothing, so the batch leaves it out (``postmortem.analyzer.ingest._parse_batched``).
    tests/test_batched_parsing.py holds the skip to the full run."""
    return any_literal(text, _LITERALS)


def parse(lines: pl.DataFrame) -> ParseResult:
    if lines.is_empty():
        return ParseResult()
    hit = lines.filter(file_gate(pl.col("text")))
    if hit.is_empty():
        return ParseResult()
    df = hit.select("line_no", "text")
    memory, oom_events = _ooms(df)
    faults = _cuda_faults(df)
    singles = _singles(df)
    blocks = (hit["text"].str.contains("Traceback (most recent call last)", literal=True).any()
              or hit["text"].str.contains("most recent call first", literal=True).any()
              or hit["text"].str.contains("Fatal Python error", literal=True).any())
    st = with_stream_holding(lines, any_literal(pl.col("text"), _STREAM_MARKS)) if blocks else None
    tb_events = tb_stacks = fh_events = fh_stacks = None
    tb_consumed = fh_consumed = pl.Series("line_no", [], dtype=pl.UInt32)
    if st is not None:
        tb_events, tb_stacks, tb_consumed = _tracebacks(st)
        fh_events, fh_stacks, fh_consumed = _faulthandler(st)
    events = pl.concat([f for f in (oom_events, faults, singles, tb_events, fh_events) if f is not None]).sort("line_no")
    stack_parts = [f for f in (tb_stacks, fh_stacks) if f is not None and not f.is_empty()]
    stacks = pl.concat(stack_parts).sort("line_no") if stack_parts else pl.DataFrame(schema=STACKS_SCHEMA)
    events = _ops(events, stacks, st)
    consumed = pl.concat([consumed_of(memory, events), tb_consumed.cast(pl.UInt32), fh_consumed.cast(pl.UInt32)]).unique().sort()
    return ParseResult(tables={"memory": memory, "events": events, "stacks": stacks}, consumed=consumed)
