"""postmortem.parsers.pyspy: py-spy dump stacks, concatenated, embedded in logs, behind srun labels."""
from __future__ import annotations

import random

import polars as pl
import pytest

from postmortem.parsers import pyspy
from tests.parse_helpers import REAL, _env, bare







DUMP_A = [
    "Process 4001: python -u train.py --nnodes 5",
    "Python v3.10.12 (/usr/bin/python3.10)",
    "",
    'Thread 4001 (active): "MainThread"',
    "    synchronize (torch/cuda/__init__.py:801)",
    "    train_step (train.py:214)",
    "        Arguments:",
    "            batch: {'tokens': <Tensor at 0x7f2a>}",
    "        Locals:",
    "            loss: <Tensor at 0x7f2b>",
    "    main (train.py:300)",
    "    <module> (train.py:310)",
    'Thread 4102 (idle): "pt_autograd_0"',
    "    wait (threading.py:324)",
]
DUMP_B = [
    "Process 4002: python -u train.py --nnodes 5",
    "Python v3.10.12 (/usr/bin/python3.10)",
    "",
    'Thread 0x7F3A2B4C5740 (active+gil): "MainThread"',
    "    _sample_batch (data.py:88)",
    "    __next__ (torch/utils/data/dataloader.py:631)",
    "Thread 0x7F3A1D3FF640 (idle)",
    "    epoll_wait (libc.so.6)",
    "    ncclProxyService(void*) (proxy.cc:1150)",
]

# Concatenated dumps with log lines around them, then a Python traceback whose indented code
# line looks like a frame but is not in a thread block.
CONCAT = (
    ["[2026-07-24 13:00:00] collecting stacks on node03"]
    + DUMP_A
    + ["some other log line"]
    + DUMP_B
    + [
        "Traceback (most recent call last):",
        '  File "x.py", line 3, in <module>',
        "    value = compute (arg)",
        "Thread 0x00007f1b2c3d4740 (most recent call first):",
        '  File "/opt/train.py", line 88 in step',
    ]
)
# Two srun tasks dumping at once: the lines of their dumps interleave.
INTERLEAVED = [f"{task}: {line}" for pair in zip(DUMP_A[:8], DUMP_B[:8]) for task, line in zip((0, 1), pair)]


@pytest.fixture(scope="module")
def concat():
    return _env(("\n".join(CONCAT) + "\n").encode())


@pytest.fixture(scope="module")
def interleaved():
    return _env(("\n".join(INTERLEAVED) + "\n").encode())


def test_every_sample_line_is_consumed():
    lines = _env(("\n".join(pyspy.SAMPLE_LINES) + "\n").encode())
    result = pyspy.parse(lines)
    consumed = set(result.consumed.to_list())
    missing = [t for n, t in lines.select("line_no", "text").iter_rows() if n not in consumed and t.strip()]
    assert not missing, missing
    stacks = result.tables["stacks"]
    assert dict(stacks.schema) == pyspy.STACKS_SCHEMA
    last = stacks.filter(pl.col("thread_id") == "1801").to_dicts()[0]
    assert last["thread_name"] is None and last["thread_state"] == "active"
    assert last["function"].startswith("c10d::ProcessGroupNCCL::WorkNCCL::wait(std::chrono::duration<long")
    assert last["file"] == "libtorch_cuda.so" and last["file_line"] is None


def test_concatenated_dumps(concat):
    result = pyspy.parse(concat)
    stacks = result.tables["stacks"]
    a = stacks.filter(dump_index=0)
    assert set(a["pid"]) == {4001} and set(a["cmdline"]) == {"python -u train.py --nnodes 5"}
    main = a.filter(thread_name="MainThread")
    assert main.select("depth", "function", "file", "file_line").rows() == [
        (0, "synchronize", "torch/cuda/__init__.py", 801),
        (1, "train_step", "train.py", 214),
        (2, "main", "train.py", 300),
        (3, "<module>", "train.py", 310),
    ]
    assert set(main["thread_id"]) == {"4001"} and set(main["thread_state"]) == {"active"}
    assert a.filter(thread_name="pt_autograd_0").select("thread_id", "thread_state", "depth", "function").rows() == [
        ("4102", "idle", 0, "wait")]
    b = stacks.filter(dump_index=1)
    assert set(b["pid"]) == {4002}
    assert b.select("thread_id", "thread_name", "thread_state", "depth", "function", "file", "file_line").rows() == [
        ("0x7F3A2B4C5740", "MainThread", "active+gil", 0, "_sample_batch", "data.py", 88),
        ("0x7F3A2B4C5740", "MainThread", "active+gil", 1, "__next__", "torch/utils/data/dataloader.py", 631),
        ("0x7F3A1D3FF640", None, "idle", 0, "epoll_wait", "libc.so.6", None),
        ("0x7F3A1D3FF640", None, "idle", 1, "ncclProxyService(void*)", "proxy.cc", 1150),
    ]
    # nothing from the traceback or faulthandler's `Thread 0x... (most recent call first):`
    assert len(stacks) == len(main) + 1 + len(b)
    text = dict(concat.select("line_no", "text").iter_rows())
    consumed = set(result.consumed.to_list())
    assert not any(text[n].startswith(("Traceback", "    value", "Thread 0x00007f", "some other")) for n in consumed)
    # every dump line (locals included) is understood
    dump_lines = {n for n, t in text.items() if t.strip() and (t in DUMP_A or t in DUMP_B)}
    assert dump_lines <= consumed


def test_interleaved_srun_dumps(interleaved):
    stacks = pyspy.parse(interleaved).tables["stacks"]
    task = stacks.join(interleaved.select("line_no", "srun_task"), on="line_no", maintain_order="left")
    zero = task.filter(srun_task=0)
    one = task.filter(srun_task=1)
    assert set(zero["pid"]) == {4001} and set(one["pid"]) == {4002}
    assert zero["function"].to_list() == ["synchronize", "train_step"]
    assert zero["depth"].to_list() == [0, 1]
    assert one["function"].to_list() == ["_sample_batch", "__next__", "epoll_wait"]
    assert one["depth"].to_list() == [0, 1, 0]
    assert one["thread_id"].to_list() == ["0x7F3A2B4C5740", "0x7F3A2B4C5740", "0x7F3A1D3FF640"]
    assert set(stacks["dump_index"]) == {0, 1}


def test_process_line_without_python_line_is_not_a_dump():
    text = "Process 12: started\nThread 17 (idle)\n    run (worker.py:12)\n"
    result = pyspy.parse(bare(text.encode()))
    assert result.tables["stacks"].select("dump_index", "pid", "function").rows() == [(None, None, "run")]
    assert result.consumed.to_list() == [2, 3]


def test_a_dump_cut_after_its_header_is_read_alike_alone_and_beside_a_whole_one():
    """py-spy prints its header pair and no thread when it cannot sample a process: the pair is
    the parser's, whether the dump is read alone or in a batch beside a dump with threads (as
    postmortem.analyzer.ingest reads them)."""
    from tests.fuzz_corpus import batch_frame

    cut = ("\n".join(DUMP_A[:2]) + "\n").encode()
    alone = pyspy.parse(bare(cut))
    assert alone.consumed.to_list() == [1, 2] and alone.tables["stacks"].is_empty()
    beside = pyspy.parse(batch_frame([bare(cut), bare(("\n".join(DUMP_B) + "\n").encode())]))
    assert beside.consumed.filter(beside.consumed <= 2).to_list() == [1, 2]
    assert set(beside.tables["stacks"]["pid"].to_list()) == {4002}


def test_frames_without_process_header():
    text = 'Thread 17 (idle): "Dummy-3"\n    run (worker.py:12)\n'
    stacks = pyspy.parse(bare(text.encode())).tables["stacks"]
    assert stacks.select("dump_index", "pid", "thread_id", "function", "file_line").rows() == [
        (None, None, "17", "run", 12)]


def test_real_logs_have_no_stacks():
    if not REAL.is_dir():
        pytest.skip("real data not present")
    for path in sorted(REAL.glob("*/*.log")):
        result = pyspy.parse(bare(path.read_bytes()))
        assert result.tables["stacks"].is_empty(), path.name
        assert result.consumed.is_empty(), path.name


def test_garbage_returns_empty_tables():
    rng = random.Random(1)
    junk = rng.randbytes(100_000) + b"\n" + b"x" * (1 << 20)
    for frame in (_env(b""), _env(junk), bare(b"Thread " * 200_000), bare(b"\n" * 100)):
        result = pyspy.parse(frame)
        assert result.tables["stacks"].is_empty()
        assert dict(result.tables["stacks"].schema) == pyspy.STACKS_SCHEMA
        assert result.consumed.is_empty()


def test_huge_numbers_become_null():
    text = ("Process 99999999999999999999: x\nPython v3.12.1 (/usr/bin/python3)\nThread 1 (idle)\n"
            "    f (a.py:99999999999999999999)\n")
    (row,) = pyspy.parse(bare(text.encode())).tables["stacks"].to_dicts()
    assert row["pid"] is None and row["file_line"] is None and row["dump_index"] == 0
