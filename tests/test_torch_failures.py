"""PyTorch failures and Flight Recorder dumps (issue 4; docs/formats/pytorch-failures.md,
docs/formats/training-logs.md section 7)."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from postmortem.parsers import c10d, flight_recorder, torch_errors, torchrun
from postmortem.parsers.lines import envelope

ROOT = Path(__file__).resolve().parents[1]


def parse(module, *lines: str):
    return module.parse(envelope(("\n".join(lines) + "\n").encode()))


def events(result, kind=None):
    ev = result.tables["events"]
    return ev if kind is None else ev.filter(pl.col("kind") == kind)


# -- CUDA OOM, every wording --------------------------------------------------------------------

OOMS = {
    "<=1.3": (("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 10.92 GiB total capacity; "
              "9.82 GiB already allocated; 30.56 MiB free; 1.01 GiB cached)"),
              {"gpu": 0, "requested_mib": 20.0, "capacity_mib": 10.92 * 1024, "free_mib": 30.56, "allocated_mib": 9.82 * 1024,
                   "reserved_unallocated_mib": 1.01 * 1024, "reserved_mib": (9.82 + 1.01) * 1024}),
    "1.4-2.0": (("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 786.00 MiB (GPU 0; 31.74 GiB total "
                "capacity; 28.82 GiB already allocated; 577.12 MiB free; 29.97 GiB reserved in total by PyTorch) If "
                "reserved memory is >> allocated memory try setting max_split_size_mb to avoid fragmentation.  See "
                "documentation for Memory Management and PYTORCH_CUDA_ALLOC_CONF"),
                {"gpu": 0, "requested_mib": 786.0, "capacity_mib": 31.74 * 1024, "free_mib": 577.12,
                     "allocated_mib": 28.82 * 1024, "reserved_mib": 29.97 * 1024}),
    "2.1": (("torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacty of "
            "79.15 GiB of which 1.06 GiB is free. Process 12345 has 78.08 GiB memory in use. Of the allocated memory "
            "75.20 GiB is allocated by PyTorch, and 1.38 GiB is reserved by PyTorch but unallocated. If reserved but "
            "unallocated memory is large try setting max_split_size_mb to avoid fragmentation.  See documentation for "
            "Memory Management and PYTORCH_CUDA_ALLOC_CONF"),
            {"gpu": 1, "requested_mib": 2048.0, "capacity_mib": 79.15 * 1024, "free_mib": 1.06 * 1024,
                 "allocated_mib": 75.20 * 1024, "reserved_unallocated_mib": 1.38 * 1024,
                 "reserved_mib": (75.20 + 1.38) * 1024, "process_in_use_mib": 78.08 * 1024, "oom_pid": 12345}),
    "2.2+": (("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.26 GiB. GPU 3 has a total capacity of "
             "95.00 GiB of which 204.81 MiB is free. Including non-PyTorch memory, this process has 94.79 GiB memory "
             "in use. Of the allocated memory 90.11 GiB is allocated by PyTorch, with 1.50 GiB allocated in private "
             "pools (e.g., CUDA Graphs), and 2.43 GiB is reserved by PyTorch but unallocated. If reserved but "
             "unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid "
             "fragmentation.  See documentation for Memory Management  "
             "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"),
             {"gpu": 3, "requested_mib": 1.26 * 1024, "capacity_mib": 95 * 1024, "free_mib": 204.81,
                  "allocated_mib": 90.11 * 1024, "private_pools_mib": 1.5 * 1024, "reserved_unallocated_mib": 2.43 * 1024,
                  "process_in_use_mib": 94.79 * 1024}),
    "raw": ("RuntimeError: CUDA error: out of memory", {"gpu": None, "requested_mib": None}),
}


@pytest.mark.parametrize("fmt", list(OOMS))
def test_oom_every_version_to_mib(fmt):
    line, expected = OOMS[fmt]
    result = parse(torch_errors, f"[rank3]:{line}")
    (mem,) = result.tables["memory"].to_dicts()
    assert mem["oom_format"] == fmt and mem["label"] == "cuda_oom"
    for key, value in expected.items():
        assert mem[key] == (pytest.approx(value, abs=0.01) if isinstance(value, float) else value), key
    (ev,) = events(result, "cuda_oom").to_dicts()
    assert ev["line_no"] == 1 and ev["exc_type"] in ("RuntimeError", "torch.cuda.OutOfMemoryError",
                                                      "torch.OutOfMemoryError")


def test_oom_zero_bytes_and_nccl_cuda_failure():
    result = parse(torch_errors,
                   "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 512.00 KiB. GPU 0 has a total capacity "
                   "of 23.64 GiB of which 0 bytes is free. Of the allocated memory 22.00 GiB is allocated by PyTorch, and "
                   "10.00 MiB is reserved by PyTorch but unallocated.",
                   "node01:16658:23132 [3] include/alloc.h:178 NCCL WARN Cuda failure 'out of memory'")
    mem = result.tables["memory"]
    assert mem["requested_mib"][0] == 0.5 and mem["free_mib"][0] == 0.0
    assert mem["oom_format"].to_list() == ["2.2+", "raw"]


# -- CUDA faults --------------------------------------------------------------------------------

@pytest.mark.parametrize("line,cls", [
    ("RuntimeError: CUDA error: device-side assert triggered", "device_side_assert"),
    (("/pytorch/aten/src/ATen/native/cuda/IndexKernel.cu:92: operator(): block: [3,0,0], thread: [64,0,0] "
     "Assertion `-sizes[i] <= index && index < sizes[i] && \"index out of bounds\"` failed."), "device_side_assert"),
    (("[E0724 13:05:29.1 ProcessGroupNCCL.cpp:1500] [PG ID 0 PG GUID 0(default_pg) Rank 3] Process group watchdog "
     "thread terminated with exception: CUDA error: an illegal memory access was encountered"), "illegal_memory_access"),
    ("torch.AcceleratorError: CUDA error: uncorrectable ECC error encountered", "ecc"),
    ("RuntimeError: CUDA error: unspecified launch failure", "launch_failure"),
    ("RuntimeError: CUDA error: misaligned address", "misaligned_address"),
    ("RuntimeError: CUDA error: an illegal instruction was encountered", "illegal_instruction"),
    ("RuntimeError: CUDA error: the launch timed out and was terminated", "launch_timeout"),
])
def test_cuda_fault_classes(line, cls):
    (ev,) = events(parse(torch_errors, line), "cuda_fault").to_dicts()
    assert ev["detail"] == cls


def test_cuda_trailer_and_terminate_stay_c10d_events():
    result = parse(c10d, "CUDA kernel errors might be asynchronously reported at some other API call, so the "
                         "stacktrace below might be incorrect.",
                   "For debugging consider passing CUDA_LAUNCH_BLOCKING=1",
                   "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.",
                   "terminate called after throwing an instance of 'c10::AcceleratorError'")
    assert events(result)["kind"].to_list() == ["cuda_error", "cuda_error", "cuda_error", "terminate"]
    assert events(result)["detail"][3] == "c10::AcceleratorError"


# -- Python tracebacks and faulthandler ---------------------------------------------------------

def test_traceback_one_event_with_type_message_and_frames():
    result = parse(torch_errors,
                   "[rank5]: Traceback (most recent call last):",
                   '[rank5]:   File "/workspace/pretrain_gpt.py", line 300, in <module>',
                   "[rank5]:     pretrain(train_valid_test_datasets_provider)",
                   '[rank5]:   File "/workspace/megatron/training.py", line 915, in train_step',
                   "[rank5]:     loss = model(batch)",
                   "[rank5]:            ^^^^^^^^^^^^",
                   '[rank5]:   File "/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py", line 2050, in all_reduce',
                   "[rank5]:     work = group.allreduce([tensor], opts)",
                   "[rank5]: torch.distributed.DistBackendError: NCCL communicator was aborted on rank 5.  Original "
                   "reason for failure was: [Rank 5] Watchdog caught collective operation timeout")
    (ev,) = events(result, "python_traceback").to_dicts()
    assert ev["line_no"] == 1 and ev["exc_line_no"] == 9 and ev["frames"] == 3
    assert ev["exc_type"] == "torch.distributed.DistBackendError"
    assert ev["detail"].startswith("NCCL communicator was aborted on rank 5.")
    st = result.tables["stacks"]
    assert st["function"].to_list() == ["<module>", "train_step", "all_reduce"]
    assert st["depth"].to_list() == [2, 1, 0] and st["source"].unique().to_list() == ["traceback"]
    assert st["file_line"].to_list() == [300, 915, 2050] and st["dump_index"].unique().to_list() == [1]
    assert set(result.consumed.to_list()) == set(range(1, 10))


def test_interleaved_tracebacks_of_two_ranks_and_a_chained_exception():
    result = parse(torch_errors,
                   "0: Traceback (most recent call last):",
                   "1: Traceback (most recent call last):",
                   '0:   File "a.py", line 1, in f',
                   '1:   File "b.py", line 2, in g',
                   "0: KeyError: 'x'",
                   "1:     g()",
                   "1: ValueError: bad shape",
                   "0: ",
                   "0: During handling of the above exception, another exception occurred:",
                   "0: ",
                   "0: Traceback (most recent call last):",
                   '0:   File "a.py", line 9, in h',
                   "0: RuntimeError: second")
    tb = events(result, "python_traceback").sort("line_no")
    assert tb.select("line_no", "exc_type", "detail", "exc_line_no", "frames").rows() == [
        (1, "KeyError", "'x'", 5, 1), (2, "ValueError", "bad shape", 7, 1), (11, "RuntimeError", "second", 13, 1)]


def test_truncated_traceback_still_one_event():
    (ev,) = events(parse(torch_errors, "Traceback (most recent call last):",
                         '  File "main.py", line 300, in <module>', "    main()"), "python_traceback").to_dicts()
    assert ev["exc_type"] is None and ev["frames"] == 1


def test_faulthandler_dump_into_stacks():
    result = parse(torch_errors,
                   "[default3]:Fatal Python error: Segmentation fault",
                   "[default3]:",
                   "[default3]:Thread 0x00007f3a1c9e3700 (most recent call first):",
                   '[default3]:  File "/usr/lib/python3.10/threading.py", line 324 in wait',
                   '[default3]:  File "/usr/lib/python3.10/threading.py", line 607 in wait',
                   "[default3]:",
                   "[default3]:Current thread 0x00007f3a2d1f4740 (most recent call first):",
                   '[default3]:  File "/workspace/model.py", line 88 in forward',
                   '[default3]:  File "/workspace/train.py", line 12 in <module>',
                   "[default3]:",
                   "[default3]:Extension modules: numpy.core._multiarray_umath, torch._C (total: 2)")
    (ev,) = events(result, "faulthandler").to_dicts()
    assert ev["detail"] == "Segmentation fault" and ev["frames"] == 4 and ev["line_no"] == 1
    st = result.tables["stacks"]
    assert st.select("thread_id", "thread_state", "depth", "function").rows() == [
        ("0x00007f3a1c9e3700", None, 0, "wait"), ("0x00007f3a1c9e3700", None, 1, "wait"),
        ("0x00007f3a2d1f4740", "current", 0, "forward"), ("0x00007f3a2d1f4740", "current", 1, "<module>")]
    assert set(st["source"]) == {"faulthandler"} and set(st["dump_index"]) == {1}
    assert not events(result, "signal").height  # the faulthandler header is not a shell signal line


# -- Gloo, rendezvous / store, signals ------------------------------------------------------------

@pytest.mark.parametrize("line,kind,detail", [
    ("[../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection closed by peer [10.1.2.3]:23456",
     "gloo_error", "Connection closed by peer [10.1.2.3]:23456"),
    (("RuntimeError: [/opt/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:598] Connection closed by peer "
     "[10.1.2.3]:41072"), "gloo_error", "Connection closed by peer [10.1.2.3]:41072"),
    (("RuntimeError: [../third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:81] Timed out waiting 1800000ms "
     "for recv operation to complete"), "gloo_error", "Timed out waiting 1800000ms for recv operation to complete"),
    ("RuntimeError: Timed out waiting 12000ms for recv", "gloo_error", "Timed out waiting 12000ms for recv"),
    ("RuntimeError: Gloo connectFullMesh failed with [../third_party/gloo/gloo/transport/tcp/pair.cc:144] no error",
     "gloo_error", "no error"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousTimeoutError", "rendezvous_error", "RendezvousTimeoutError"),
    ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError", "rendezvous_error", "RendezvousClosedError"),
    (("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The connection to the C10d store has "
     "failed. See inner exception for details."), "rendezvous_error", "RendezvousConnectionError"),
    ("torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
     "rendezvous_error", "Timed out after 1801 seconds waiting for clients. 1/3 clients joined"),
    ("*** SIGSEGV (@0x0) received by PID 1734 (TID 0x7f3a2d1f4740) from PID 0; stack trace: ***", "signal", "SIGSEGV"),
    ("Segmentation fault (core dumped)", "signal", "Segmentation fault"),
    ("/var/spool/slurmd/job4242/slurm_script: line 12:  1734 Killed   python train.py", "signal", "Killed"),
])
def test_gloo_rendezvous_signal_lines(line, kind, detail):
    (ev,) = events(parse(torch_errors, line)).to_dicts()
    assert (ev["kind"], ev["detail"]) == (kind, detail)


def test_monitored_barrier_and_store_wordings_in_c10d():
    result = parse(c10d,
                   "RuntimeError: Rank 1 failed to pass monitoredBarrier in 2000 ms",
                   "[E ProcessGroupGloo.cpp:136] [Rank 0]: Rank 1 failed to pass monitoredBarrier in 2000 ms",
                   "RuntimeError: Ranks 1, 2 failed to pass monitoredBarrier in 120000 ms",
                   "Waiting in store based barrier to initialize process group for rank: 0, key: "
                   "store_based_barrier_key:1 (world_size=4, worker_count=1, timeout=0:30:00)",
                   "Added key: store_based_barrier_key:1 to store for rank: 3",
                   "Rank 1: Completed store-based barrier for key:store_based_barrier_key:1 with 8 nodes.",
                   "Timed out initializing process group in store based barrier on rank: 2, for key: "
                   "store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=0:30:00)",
                   "torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for clients. 1/3 clients joined.",
                   "[W909 09:55:29.1 socket.cpp:663] [c10d] waitForInput: poll for socket SocketImpl(fd=100, "
                   "addr=[host]:43590, remote=[host]:20000) returned 0, likely a timeout",
                   "[W909 09:55:29.1 socket.cpp:663] [c10d] waitForInput: socket SocketImpl(fd=100) timed out after 1800000ms",
                   "torch.distributed.DistBackendError: [3] is setting up NCCL communicator and retrieving ncclUniqueId "
                   "from [0] via c10d key-value store by key '0', but store->get('0') got error: wait timeout after 300000ms",
                   "[W924 01:02:03.1 TCPStore.cpp:125] [c10d] recvValue failed on SocketImpl(fd=76, "
                   "addr=[localhost]:60950, remote=[localhost]:29500): Connection reset by peer",
                   "[E ProcessGroupNCCL.cpp:1000] [PG 0 Rank 1] Failed to get exception dump flag from the global "
                   "store.Connection reset by peer")
    assert events(result)["kind"].to_list() == (
        ["monitored_barrier"] * 3 + ["store_barrier"] * 4 + ["store_error"] * 3 + ["unique_id_store"]
        + ["store_error"] * 2)


def test_c10d_settings_banners_keys_values_and_order():
    """Both banners' pairs, in the lines' order: an option's key keeps its unit and takes ``pg.``,
    an environment key drops its explanation (a colon in it too), a value is what follows the
    pair's last colon."""
    result = parse(c10d,
                   "[I1021 10:00:00.1 ProcessGroupNCCL.cpp:900] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
                   "ProcessGroupNCCL initialization options: size: 8, global rank: 3, TIMEOUT(ms): 600000, PG Name: 0",
                   "[I1021 10:00:00.2 ProcessGroupNCCL.cpp:901] [PG ID 0 PG GUID 0(default_pg) Rank 3] "
                   "ProcessGroupNCCL environments: NCCL version: 2.21.5, TORCH_NCCL_ENABLE_MONITORING "
                   "(Whether to kill: yes): 1, TORCH_NCCL_DUMP_ON_TIMEOUT: 0, no pair here, url: tcp://h:29500",
                   "[I1021 10:00:00.3 ProcessGroupNCCL.cpp:900] [PG ID 1 PG GUID 1 Rank 3] "
                   "ProcessGroupNCCL initialization options: size: 2, TIMEOUT(ms): 1800000")
    settings = result.tables["settings"]
    assert settings.select("source", "key", "value").rows() == [
        ("c10d-pg-options", "pg.size", "8"), ("c10d-pg-options", "pg.global rank", "3"),
        ("c10d-pg-options", "pg.TIMEOUT(ms)", "600000"), ("c10d-pg-options", "pg.PG Name", "0"),
        ("c10d-env", "NCCL version", "2.21.5"), ("c10d-env", "TORCH_NCCL_ENABLE_MONITORING", "1"),
        ("c10d-env", "TORCH_NCCL_DUMP_ON_TIMEOUT", "0"), ("c10d-env", "url", "29500"),
        ("c10d-pg-options", "pg.size", "2"), ("c10d-pg-options", "pg.TIMEOUT(ms)", "1800000")]
    assert settings["line_no"].to_list() == [1] * 4 + [2] * 4 + [3] * 2


def test_detail_fingerprints_every_era():
    result = parse(c10d,
                   "RuntimeError: Detected mismatch between collectives on ranks. Rank 3 is running inconsistent "
                   "collective: CollectiveFingerPrint(OpType=BARRIER)",
                   "RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is running collective: "
                   "CollectiveFingerPrint(OpType=ALLREDUCE, TensorShape=[20, 10], TensorDtypes=Float, "
                   "TensorDeviceTypes=TensorOptions(dtype=float)), but Rank 1 is running collective: "
                   "CollectiveFingerPrint(OpType=REDUCE, TensorShape=[20, 10], TensorDtypes=Float).",
                   "RuntimeError: Detected mismatch between collectives on ranks. Rank 2 is running collective: "
                   "CollectiveFingerPrint(SequenceNumber=1OpType=BARRIER), but Rank 0 is running collective: "
                   "CollectiveFingerPrint(SequenceNumber=1OpType=ALLREDUCE, TensorShape=[4], TensorDtypes=Float).",
                   "Collectives differ in the following aspects: \tOp type: BARRIERvs ALLREDUCE",
                   "\tTensor Tensor shapes: 195812480vs 51123456",
                   "RuntimeError: DDP expects same model across all ranks, but Rank 3 has 51 params, while rank 0 has "
                   "inconsistent 0 params.")
    fp = result.tables["collectives"].filter(pl.col("kind") == "fingerprint")
    assert fp.select("pg_rank", "seq", "op", "numel_in").rows() == [
        (3, None, "BARRIER", None), (0, None, "ALLREDUCE", 200), (1, None, "REDUCE", 200),
        (2, 1, "BARRIER", None), (0, 1, "ALLREDUCE", 4)]
    kinds = events(result)["kind"].to_list()
    assert kinds[-3:] == ["fingerprint_diff", "fingerprint_diff", "ddp_model_mismatch"]


def test_elastic_agent_and_child_failed_error():
    result = parse(torchrun,
                   "E0813 08:21:22.980000 1245483 torch/distributed/elastic/multiprocessing/api.py:984] failed "
                   "(exitcode: -6) local_rank: 6 (pid: 1246013) of binary: /usr/bin/python3",
                   "W0813 08:21:20.123000 1245483 torch/distributed/elastic/multiprocessing/api.py:897] Sending process "
                   "188 closing signal SIGTERM",
                   "E0813 08:21:50.123000 1245483 torch/distributed/elastic/multiprocessing/api.py:897] Unable to "
                   "shutdown process 188 via Signals.SIGTERM, forcefully exiting via Signals.SIGKILL",
                   "WARNING:torch.distributed.elastic.multiprocessing.api:Sending process 189 closing signal SIGTERM",
                   "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
                   "=" * 60, "train.py FAILED", "-" * 60, "Failures:", "  <NO_OTHER_FAILURES>", "-" * 60,
                   "Root Cause (first observed failure):", "[0]:",
                   "  time      : 2026-07-24_20:47:35", "  host      : node01", "  rank      : 2 (local_rank: 2)",
                   "  exitcode  : -6 (pid: 1797)  (SIGABRT)", "  error_file: <N/A>",
                   "  traceback : Signal 6 (SIGABRT) received by PID 1797", "=" * 60)
    agent = result.tables["agent"]
    assert agent.select("kind", "exitcode", "pid", "signal").rows() == [
        ("worker_failed", -6, 1246013, None), ("closing_signal", None, 188, "SIGTERM"),
        ("force_kill", None, 188, "SIGKILL"), ("closing_signal", None, 189, "SIGTERM")]
    (row,) = result.tables["exits"].to_dicts()
    assert (row["rank"], row["exitcode"], row["signal"], row["root_cause"]) == (2, -6, "SIGABRT", True)


# -- real excerpts --------------------------------------------------------------------------------

def test_real_excerpts_every_oom_and_traceback(real_logs):
    found = {}
    for path in sorted(real_logs.glob("*/*.log")):
        result = torch_errors.parse(envelope(path.read_bytes()))
        if "events" not in result.tables:
            continue
        result.tables["events"]
        found[path.name] = (events(result, "cuda_oom").height, events(result, "python_traceback").height,
                            result.tables["stacks"].height)
    hits = {k: v for k, v in found.items() if v[0] or v[1]}
    # counts verified by reading the excerpts: every traceback is cut short by the poster
    assert hits == {
        "nccl-issue-1235-oom-during-p2p-setup-socket-closed.log": (1, 0, 0),   # NCCL WARN Cuda failure 'out of memory'
        "megatron-lm-issue-525-oom-pre21-format.log": (1, 0, 0),
        "openrlhf-issue-1135-conditional-save-allgather.log": (0, 1, 1),
        "nemo-issue-14850-srun-label-moe.log": (0, 1, 9),
        "torchrec-issue-189-alltoall-seq-desync.log": (0, 1, 1),
    }
    mem = torch_errors.parse(envelope((real_logs / "training" / "megatron-lm-issue-525-oom-pre21-format.log")
                                      .read_bytes())).tables["memory"].row(0, named=True)
    assert (mem["oom_format"], mem["requested_mib"], mem["free_mib"]) == ("1.4-2.0", 786.0, 577.12)
    assert mem["reserved_mib"] == pytest.approx(29.97 * 1024)


# -- Flight Recorder --------------------------------------------------------------------------------

def _dump(version="2.10", **extra):
    entry = {
        "record_id": 7, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": 3,
        "p2p_seq_id": 0, "op_id": 3, "profiling_name": "nccl:all_reduce", "time_created_ns": 1784884954249920000,
        "time_discovered_started_ns": 1784884954250920000, "time_discovered_completed_ns": None,
        "input_sizes": [[3, 4]], "input_dtypes": ["Float"], "output_sizes": [[3, 4]], "output_dtypes": ["Float"],
        "state": "started", "retired": False, "timeout_ms": 600000, "is_p2p": False, "duration_ms": None,
        "frames": [{"name": "all_reduce", "filename": "torch/distributed/distributed_c10d.py", "line": 2050},
                   {"name": "train", "filename": "train.py", "line": 12}],
        "thread_id": "140", "thread_name": "pt_main_thread",
    }
    send = dict(entry, record_id=8, pg_id=1, process_group=("5", "PP"), collective_seq_id=0, p2p_seq_id=4, op_id=4,
                profiling_name="nccl:send 0->1", is_p2p=True, state="scheduled", frames=[],
                time_discovered_started_ns=None)
    dump = {"version": version, "comm_lib_version": "2.27.3",
            "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
                          "5": {"name": "5", "desc": "PP", "ranks": "[2, 3]"}},
            "pg_status": {"0": {"last_enqueued_collective": 3, "last_started_collective": 3,
                                "last_completed_collective": 2},
                          "1": {"last_enqueued_collective": 0, "last_started_collective": -1,
                                "last_completed_collective": 0}},
            "entries": [entry, send], "nccl_comm_state": {"0x1234": {"status": "ok"}}}
    dump.update(extra)
    return dump


def test_fr_pickle_all_fields():
    result, problems = flight_recorder.parse_dump(pickle.dumps(_dump()), "dumps/nccl_trace_rank_2")
    assert problems == []
    c = result.tables["collectives"].to_dicts()
    assert [r["kind"] for r in c] == ["flight_recorder"] * 2
    a, s = c
    assert (a["rank"], a["pg_id"], a["pg_guid"], a["pg_desc"], a["pg_rank"], a["seq"], a["op"]) == \
        (2, 0, "0", "default_pg", 2, 3, "all_reduce")
    assert (a["record_id"], a["op_id"], a["numel_in"], a["numel_out"], a["state"], a["retired"]) == (7, 3, 12, 12, "started", False)
    assert a["input_sizes"] == "[[3, 4]]" and a["input_dtypes"] == '["Float"]' and a["timeout_ms"] == 600000
    assert str(a["time_created"]) == "2026-07-24 09:22:34.249920+00:00" and a["time_completed"] is None
    assert a["time_started"] is not None and a["thread_name"] == "pt_main_thread" and a["fr_version"] == "2.10"
    assert (s["is_p2p"], s["p2p_seq"], s["op"], s["peer"], s["pg_rank"]) == (True, 4, "send", 1, 0)
    prog = result.tables["progress"].sort("pg_id").select("pg_id", "pg_guid", "last_enqueued", "last_started",
                                                          "last_completed", "rank").rows()
    assert prog == [(0, "0", 3, 3, 2, 2), (1, "5", 0, -1, 0, 2)]
    st = result.tables["stacks"]
    assert st.select("depth", "function", "file_line", "record_id", "rank").rows() == [
        (0, "all_reduce", 2050, 7, 2), (1, "train", 12, 7, 2)]
    pg = result.tables["pg_ranks"].filter(pl.col("pg_guid") == "5")
    assert pg.select("group_rank", "global_rank", "group_size").rows() == [(0, 2, 2), (1, 3, 2)]
    d = result.tables["fr_dumps"].row(0, named=True)
    assert (d["format"], d["fr_version"], d["lib_version"], d["entries"], d["with_stacks"]) == ("pickle", "2.10", "2.27.3", 2, True)
    assert result.tables["fr_comm_state"].select("comm", "key", "value").rows() == [("0x1234", "status", "ok")]


@pytest.mark.parametrize("name,rank", [("nccl_trace_rank_12", 12), ("job-host3_rank_7.pkl", 7), ("fr_5.json", 5),
                                       ("trace", None)])
def test_fr_any_file_name(name, rank):
    result, problems = flight_recorder.parse_dump(pickle.dumps(_dump()), name)
    assert set(result.tables["collectives"]["rank"].to_list()) == {rank}
    assert bool(problems) == (rank is None)


def test_fr_json_strings_and_old_versions():
    dump = _dump(version="1.1")
    for e in dump["entries"]:
        for k, v in list(e.items()):
            e[k] = None if v is None else list(v) if isinstance(v, tuple) else str(v)
        e.pop("frames")
    del dump["pg_config"], dump["pg_status"]
    result, problems = flight_recorder.parse_dump(json.dumps(dump).encode(), "nccl_trace_rank_1.json")
    c = result.tables["collectives"].row(0, named=True)
    assert (c["seq"], c["numel_in"], c["retired"], c["is_p2p"], c["rank"]) == (3, 12, False, False, 1)
    assert problems == [] and result.tables["fr_dumps"]["format"][0] == "json"


def _long_dump():
    dump = _dump()
    first = dump["entries"][0]
    dump["entries"] = [dict(first, record_id=i, collective_seq_id=i, op_id=i, time_created_ns=first["time_created_ns"] + i)
                       for i in range(40)]
    return dump


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_fr_truncated_pickle_keeps_the_entries_before_the_cut(protocol):
    data = pickle.dumps(_long_dump(), protocol=protocol)
    result, problems = flight_recorder.parse_dump(data[: len(data) * 3 // 4], "nccl_trace_rank_0")
    assert len(problems) == 1 and problems[0].startswith("truncated or corrupt pickle")
    seqs = result.tables["collectives"]["seq"].to_list()
    assert 10 < len(seqs) < 40 and seqs[:-1] == list(range(len(seqs) - 1))
    assert result.tables["progress"].height == 2 and result.tables["pg_ranks"].height == 6


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_fr_truncated_or_corrupt_gives_a_problem(fmt):
    data = pickle.dumps(_dump()) if fmt == "pickle" else json.dumps(_dump(), default=list).encode()
    for cut in ((10, 3) if fmt == "pickle" else (len(data) // 2, 10, 3)):
        with pytest.raises(flight_recorder.NotFlightRecorder, match="truncated or corrupt"):
            flight_recorder.parse_dump(data[:cut], "nccl_trace_rank_0")
    if fmt == "pickle":  # damage in the middle of the bytes
        with pytest.raises(flight_recorder.NotFlightRecorder, match="truncated or corrupt"):
            flight_recorder.parse_dump(data[:2] + b"\xff" * 20 + data[22:], "nccl_trace_rank_0")
    with pytest.raises(flight_recorder.NotFlightRecorder, match="without Flight Recorder keys"):
        flight_recorder.parse_dump(pickle.dumps([1, 2, 3]), "nccl_trace_rank_0")
    # FR-shaped but damaged inside: problems, no exception
    result, problems = flight_recorder.parse_dump(pickle.dumps({"version": "2.7", "entries": [1, {"pg_id": "x"}],
                                                                "pg_status": [], "pg_config": {"0": {"ranks": "oops"}}}),
                                                  "nccl_trace_rank_0")
    assert any("not dicts" in p for p in problems) and any("unreadable ranks" in p for p in problems)
    assert result.tables["collectives"].height == 1


class _Hostile:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


class _Writes:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "pwned"))


def test_hostile_pickle_runs_no_code(tmp_path):
    marker = tmp_path / "pwned"
    for payload in (_Hostile(marker), _Writes(marker), {"version": "2.7", "entries": [_Hostile(marker)]}):
        data = pickle.dumps(payload)
        with pytest.raises(flight_recorder.NotFlightRecorder, match="refused to load the global"):
            flight_recorder.parse_dump(data, "nccl_trace_rank_0")
        assert not marker.exists()
    # and through the whole pipeline: a clear message naming the file, the rest analysed
    from postmortem.analyzer.pipeline import analyze

    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "nccl_trace_rank_0").write_bytes(pickle.dumps(_Hostile(marker)))
    (tmp_path / "run" / "good.log").write_text("RuntimeError: CUDA error: misaligned address\n")
    run = analyze([tmp_path / "run"])
    text = "\n".join(run.messages)
    assert "nccl_trace_rank_0: Python pickle that is not a readable Flight Recorder dump" in text
    assert "posix.system" in text or "os.system" in text
    assert not marker.exists()


@pytest.fixture(scope="module")
def fr_runs(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run

    out = {}
    for fmt in ("pickle", "json"):
        path = tmp_path_factory.mktemp(f"fr-{fmt}")
        generate_run(path, RunSpec(nodes=1, gpus_per_node=4, culprit=2, flight_recorder=fmt,
                                   flight_recorder_prefix="nccl_trace_rank_" if fmt == "pickle" else "myjob_dump_"))
        out[fmt] = path
    return out


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_generated_fr_round_trip(fr_runs, fmt):
    files = sorted((fr_runs[fmt] / "flight_recorder").rglob("*"))
    files = [f for f in files if f.is_file()]
    assert len(files) == 4
    by_rank = {}
    for f in files:
        result, problems = flight_recorder.parse_dump(f.read_bytes(), f.name)
        assert problems == []
        c = result.tables["collectives"].filter(pl.col("pg_id") == 0).sort("seq")
        by_rank[c["rank"][0]] = c.row(-1, named=True)
        assert result.tables["stacks"].is_empty() == (fmt == "json")
    assert {r: (row["seq"], row["state"], row["op"]) for r, row in by_rank.items()} == {
        0: (7219, "scheduled", "_all_gather_base"), 1: (7219, "scheduled", "_all_gather_base"),
        2: (7218, "completed", "all_reduce"), 3: (7219, "scheduled", "_all_gather_base")}
    assert by_rank[0]["numel_in"] == 8069120 and by_rank[0]["numel_out"] == 8069120 * 4


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_query_shows_last_collective_per_rank(fr_runs, tmp_path, fmt):
    db = tmp_path / "run.duckdb"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "postmortem.cli", "ingest", str(fr_runs[fmt]), "--db", str(db)],
                   check=True, capture_output=True, env=env)
    sql = ("SELECT rank, max(seq) AS last_seq, arg_max(state, seq) AS state FROM collectives "
           "WHERE kind = 'flight_recorder' AND pg_id = 0 GROUP BY rank ORDER BY rank")
    proc = subprocess.run([sys.executable, "-m", "postmortem.cli", "query", "--db", str(db), "--format", "csv", sql],
                          check=True, capture_output=True, text=True, env=env)
    assert proc.stdout.split() == ["rank,last_seq,state", "0,7219,scheduled", "1,7219,scheduled",
                                   "2,7218,completed", "3,7219,scheduled"]
    # log-derived rows keep their attributed ranks next to the FR rows
    import duckdb

    con = duckdb.connect(str(db), read_only=True)
    assert con.execute("SELECT count(*) FROM collectives WHERE kind = 'watchdog_timeout' AND rank IS NULL").fetchone() == (0,)
    assert con.execute("SELECT count(*) FROM progress WHERE kind = 'flight_recorder'").fetchone()[0] == 8


def test_generator_default_writes_no_dumps(tmp_path):
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path, RunSpec(nodes=1, gpus_per_node=2, culprit=1))
    assert not (tmp_path / "flight_recorder").exists()


@pytest.mark.parametrize("kind,fault", [("cuda-ecc", ("cuda_fault", "ecc")),
                                        ("illegal-address", ("cuda_fault", "illegal_memory_access")),
                                        ("device-assert", ("cuda_fault", "device_side_assert")),
                                        ("gloo-closed", ("gloo_error", "Connection closed by peer [10.0.0.2]:45123"))])
def test_generated_crash_kinds_round_trip(tmp_path, kind, fault):
    from postmortem.analyzer.pipeline import analyze
    from postmortem.generator import RunSpec, generate_run

    truth = generate_run(tmp_path, RunSpec(nodes=1, gpus_per_node=4, culprit=2, attempts=2, crash_kind=kind,
                                           pyspy=False, nccl_debug=False))
    (failure,) = truth["earlier_failures"]
    assert failure["kind"] == kind
    run = analyze([tmp_path])
    ev = run.frame("SELECT kind, detail, rank, attempt, exc_type FROM events WHERE kind IN "
                   "('cuda_fault', 'gloo_error', 'python_traceback', 'cuda_oom') AND attempt = 0 ORDER BY line_no")
    assert (fault[0], fault[1], failure["rank"]) in {(k, d, r) for k, d, r, _, _ in ev.rows()}
    tb = ev.filter(pl.col("kind") == "python_traceback")
    assert tb.height == 1 and tb["rank"][0] == failure["rank"] and "cuda_oom" not in ev["kind"].to_list()
    frames = run.frame(f"SELECT count(*) AS n FROM stacks WHERE source = 'traceback' AND rank = {failure['rank']}")
    assert frames["n"][0] == 7  # the Megatron backward traceback (the agent's ChildFailedError one has no rank)


def test_a_folder_of_dumps_alone_is_analysable(fr_runs):
    from postmortem.analyzer.pipeline import analyze

    run = analyze([fr_runs["pickle"] / "flight_recorder"])
    assert not run.messages
    rows = run.frame("SELECT rank, max(seq) AS s FROM collectives WHERE pg_id = 0 GROUP BY rank ORDER BY rank").rows()
    assert rows == [(0, 7219), (1, 7219), (2, 7218), (3, 7219)]
    kinds = run.frame("SELECT DISTINCT kind FROM inputs")["kind"].to_list()
    assert kinds == ["flight_recorder"]


def test_fr_trace_analyzer_output_lines():
    result = parse(torch_errors,
                   "Not all ranks joining collective, sequence number: 7219",
                   "Not all ranks joining collective: sequence number: 88",
                   "internal record id: 11058",
                   "group info: 0:default_pg",
                   "collective: nccl:_all_gather_base",
                   "missing ranks: {17}",
                   "error msg: Culprit rank 17; Error type: SIZE_OR_SYNTAX_MISMATCH, Expected input sizes: "
                   "'[[4]]' does not match found input sizes: '[[2]]'",
                   "collective stack trace:",
                   "Collective sequence number: 12 has errors",
                   "Input/output mismatch in the collective sequence number: 13",
                   "Too many mismatches for process_group 0: aborting")
    ev = events(result)
    verdicts = ev.filter(pl.col("kind") == "fr_trace").select("detail", "value").rows()
    assert verdicts == [("Not all ranks joining collective", 7219.0), ("Not all ranks joining collective", 88.0),
                        ("has errors", 12.0), ("Input/output mismatch", 13.0),
                        ("Too many mismatches for process_group", None)]
    details = ev.filter(pl.col("kind") == "fr_trace_detail")
    assert details["detail"].to_list() == ["internal record id", "group info", "collective", "missing ranks",
                                           "error msg", "collective stack trace"]
    assert details["message"][3] == "missing ranks: {17}"
