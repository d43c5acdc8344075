"""postmortem.parsers.torchrun: ChildFailedError tables, elastic agent lines, Slurm termination lines."""
from __future__ import annotations

import random
from datetime import datetime

import polars as pl
import pytest

from postmortem.parsers import torchrun
from tests.parse_helpers import REAL, _env, bare





def parse_text(text: str):
    return torchrun.parse(_env(text.encode()))




def real(name: str) -> bytes:
    path = REAL / name
    if not path.is_file():
        pytest.skip(f"{path} is not present")
    return path.read_bytes()


# Crafted cases, all in one input (one envelope call); each case's rows are found by its
# line range. Cases are separated by a plain text line, which ends any block.
CASES: dict[str, list[str]] = {
    "two_nodes_srun": [
        # Two node agents print their tables at once through `srun --label`.
        "0: ============================================================",
        "1: ============================================================",
        "0: pretrain_gpt.py FAILED",
        "1: pretrain_gpt.py FAILED",
        "0: ------------------------------------------------------------",
        "1: ------------------------------------------------------------",
        "0: Failures:",
        "1: Failures:",
        "0:   <NO_OTHER_FAILURES>",
        "1: [1]:",
        "0: ------------------------------------------------------------",
        "1:   time      : 2026-07-24_20:47:41",
        "0: Root Cause (first observed failure):",
        "1:   host      : node02",
        "0: [0]:",
        "1:   rank      : 9 (local_rank: 1)",
        "0:   time      : 2026-07-24_20:47:35",
        "1:   exitcode  : -15 (pid: 2202)",
        "0:   host      : node01",
        "1:   error_file: <N/A>",
        "0:   rank      : 3 (local_rank: 3)",
        "1:   traceback : Signal 15 (SIGTERM) received by PID 2202",
        "0:   exitcode  : -6 (pid: 1797)  (SIGABRT)",
        "1: ------------------------------------------------------------",
        "0:   error_file: <N/A>",
        "1: Root Cause (first observed failure):",
        "0:   traceback : Signal 6 (SIGABRT) received by PID 1797",
        "1: [0]:",
        "0: ============================================================",
        "1:   time      : 2026-07-24_20:47:40",
        "1:   host      : node02",
        "1:   rank      : 8 (local_rank: 0)",
        "1:   exitcode  : -9 (pid: 2201)",
        "1:   error_file: <N/A>",
        "1:   traceback : Signal 9 (SIGKILL) received by PID 2201",
        "1: ============================================================",
    ],
    "record_traceback": [
        "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ",
        "============================================================",
        "train.py FAILED",
        "------------------------------------------------------------",
        "Failures:",
        "  <NO_OTHER_FAILURES>",
        "------------------------------------------------------------",
        "Root Cause (first observed failure):",
        "[0]:",
        "  time      : 2024-11-02_10:00:07",
        "  host      : gpu-a-17.cluster.local",
        "  rank      : 12 (local_rank: 4)",
        "  exitcode  : 1 (pid: 4242)",
        "  error_file: /tmp/torchelastic_x1/none_y2/attempt_0/4/error.json",
        "  traceback : Traceback (most recent call last):",
        '    File "/opt/train.py", line 88, in main',
        "      loss.backward()",
        "  RuntimeError: CUDA error: an illegal memory access was encountered",
        "  ",
        "============================================================",
    ],
    "torch19": [
        "***************************************",
        "            train.py FAILED            ",
        "=======================================",
        "Root Cause:",
        "[0]:",
        "  time: 2021-08-11_09:12:13",
        "  rank: 5 (local_rank: 1)",
        "  exitcode: -11 (pid: 777)",
        "  error_file: <N/A>",
        '  msg: "Process failed with exitcode -11"',
        "=======================================",
        "Other Failures:",
        "  <NO_OTHER_FAILURES>",
        "***************************************",
    ],
    "not_a_table": [
        "config:",
        "  rank      : 3",
        "  host      : somewhere",
        "[0]:",
        "  time      : yesterday",
        "=====================",
        "Tests FAILED",
    ],
    "agent": [
        "[2024-01-10 10:21:30,001] torch.distributed.elastic.multiprocessing.api: [ERROR] failed "
        "(exitcode: 1) local_rank: 0 (pid: 9001) of binary: /opt/conda/bin/python",
        "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: -9) local_rank: 2 "
        "(pid: 7002) of binary: /usr/bin/python3",
        "W0813 08:21:52.000000 1245483 torch/distributed/elastic/multiprocessing/api.py:916] "
        "Unable to shutdown process 1246007 via 15, forcefully exiting via 9",
        "WARNING:torch.distributed.elastic.multiprocessing.api:Unable to shutdown process 188 "
        "via SIGTERM , forcefully exiting via SIGKILL",
        "I0813 08:00:01.000000 1245483 torch/distributed/launcher/api.py:188] Starting elastic_operator "
        "with launch configs:",
        "I0813 08:00:01.000000 1245483 torch/distributed/launcher/api.py:188]   entrypoint       : train.py",
        "I0813 08:00:01.000000 1245483 torch/distributed/launcher/api.py:188]   nproc_per_node   : 8",
        "I0813 08:00:01.000000 1245483 torch/distributed/launcher/api.py:188]   rdzv_endpoint    : node01:29500",
        "[2024-01-10 10:20:00,500] torch.distributed.elastic.agent.server.api: [INFO] [default] Worker "
        "group FAILED. 2/3 attempts left; will restart worker group",
        "  local_rank: 3 (pid: 1) something unrelated",
    ],
    "slurm": [
        "slurmstepd: error: *** STEP 4242.0 ON gpu-b-03 CANCELLED AT 2026-07-24T13:22:05 DUE TO NODE FAILURE ***",
        "slurmstepd: error: *** JOB 4243 ON gpu-b-04 CANCELLED AT 2026-07-25T01:02:03 DUE to PREEMPTION ***",
        "slurmstepd: error: *** STEP 4242.0 STEPD TERMINATED ON gpu-b-03 AT 2026-07-24T13:24:05 DUE TO JOB "
        "NOT ENDING WITH SIGNALS ***",
        "srun: error: gpu-b-03: tasks 0-3,5: Killed",
        "srun: error: gpu-b-04: task 12: Segmentation fault (core dumped)",
        "slurmstepd: error: Detected 2 oom-kill event(s) in step 4242.batch cgroup. Some of your "
        "processes may have been killed by the cgroup out-of-memory handler.",
    ],
}


def _build() -> tuple[str, dict[str, tuple[int, int]]]:
    lines: list[str] = []
    ranges = {}
    for name, body in CASES.items():
        lines.append(f"case {name} starts here")
        first = len(lines) + 1
        lines.extend(body)
        ranges[name] = (first, len(lines))
    lines.append("end of cases")
    return "\n".join(lines) + "\n", ranges


TEXT, RANGES = _build()


@pytest.fixture(scope="module")
def crafted():
    return parse_text(TEXT)


def rows(table: pl.DataFrame, case: str) -> pl.DataFrame:
    lo, hi = RANGES[case]
    return table.filter(pl.col("line_no").is_between(lo, hi))


def test_every_sample_line_is_consumed():
    lines = _env(("\n".join(torchrun.SAMPLE_LINES) + "\n").encode())
    result = torchrun.parse(lines)
    consumed = set(result.consumed.to_list())
    missing = [t for n, t in lines.select("line_no", "text").iter_rows() if n not in consumed and t.strip()]
    assert not missing, missing
    assert result.tables["exits"]["rank"].to_list() == [57, 58]
    assert result.tables["exits"]["signal"].to_list() == ["SIGTERM", "SIGABRT"]


def test_schemas(crafted):
    assert dict(crafted.tables["exits"].schema) == torchrun.EXITS_SCHEMA
    assert dict(crafted.tables["agent"].schema) == torchrun.AGENT_SCHEMA
    assert dict(crafted.tables["slurm"].schema) == torchrun.SLURM_SCHEMA


def test_interleaved_srun_tables_stay_apart(crafted):
    exits = rows(crafted.tables["exits"], "two_nodes_srun").sort("rank")
    assert exits.select("rank", "local_rank", "exitcode", "pid", "signal", "root_cause", "host").rows() == [
        (3, 3, -6, 1797, "SIGABRT", True, "node01"),
        (8, 0, -9, 2201, "SIGKILL", True, "node02"),
        (9, 1, -15, 2202, "SIGTERM", False, "node02"),
    ]
    assert set(exits["entrypoint"]) == {"pretrain_gpt.py"}
    assert exits["time"].to_list() == [datetime(2026, 7, 24, 20, 47, 35), datetime(2026, 7, 24, 20, 47, 40),
                                       datetime(2026, 7, 24, 20, 47, 41)]
    assert exits["error_file"].null_count() == 3
    # line_no is the `[N]:` line, so the analyzer can attach the srun task of that line
    lines = _env(TEXT.encode())
    tasks = exits.join(lines.select("line_no", "srun_task"), on="line_no", maintain_order="left")["srun_task"].to_list()
    assert tasks == [0, 1, 1]
    # every line of both tables is understood
    lo, hi = RANGES["two_nodes_srun"]
    assert set(range(lo, hi + 1)) <= set(crafted.consumed.to_list())


def test_traceback_block(crafted):
    (row,) = rows(crafted.tables["exits"], "record_traceback").to_dicts()
    assert row["block_index"] == 0 and row["root_cause"] is True
    assert row["rank"] == 12 and row["local_rank"] == 4 and row["exitcode"] == 1 and row["pid"] == 4242
    assert row["signal"] is None
    assert row["error_file"].endswith("attempt_0/4/error.json")
    assert row["traceback"] == "Traceback (most recent call last):"
    assert row["entrypoint"] == "train.py" and row["host"] == "gpu-a-17.cluster.local"


def test_torch19_layout(crafted):
    (row,) = rows(crafted.tables["exits"], "torch19").to_dicts()
    assert row["entrypoint"] == "train.py"
    assert row["root_cause"] is True
    assert (row["rank"], row["local_rank"], row["exitcode"], row["pid"]) == (5, 1, -11, 777)
    assert row["signal"] == "SIGSEGV"  # from the negative exit code
    assert row["traceback"] == "Process failed with exitcode -11"
    assert row["host"] is None and row["time"] == datetime(2021, 8, 11, 9, 12, 13)


def test_lookalikes_are_not_failures(crafted):
    assert rows(crafted.tables["exits"], "not_a_table").is_empty()
    lo, hi = RANGES["not_a_table"]
    assert not set(range(lo, hi + 1)) & set(crafted.consumed.to_list())


def test_agent_lines(crafted):
    agent = rows(crafted.tables["agent"], "agent")
    failed = agent.filter(kind="worker_failed")
    assert failed.select("exitcode", "local_rank", "pid", "value").rows() == [
        (1, 0, 9001, "/opt/conda/bin/python"), (-9, 2, 7002, "/usr/bin/python3")]
    assert failed["ts"].to_list() == [datetime(2024, 1, 10, 10, 21, 30, 1000), None]
    kills = agent.filter(kind="force_kill")
    assert kills.select("pid", "signal").rows() == [(1246007, "SIGKILL"), (188, "SIGKILL")]
    assert kills["ts"][0] == datetime(2000, 8, 13, 8, 21, 52)
    config = agent.filter(pl.col("kind") == "launch_config", pl.col("key").is_not_null())
    assert config.select("key", "value").rows() == [
        ("entrypoint", "train.py"), ("nproc_per_node", "8"), ("rdzv_endpoint", "node01:29500")]
    assert config["ts"].to_list() == [datetime(2000, 8, 13, 8, 0, 1)] * 3
    restart = agent.filter(kind="restart")
    assert restart.select("key", "value").rows() == [("attempts_left", "2/3")]
    # the unrelated indented line after the block is not an agent line
    assert agent["line_no"].max() < RANGES["agent"][1]


def test_slurm_variants(crafted):
    slurm = rows(crafted.tables["slurm"], "slurm")
    assert slurm.select("kind", "job_id", "host", "tasks", "exit_code", "reason").rows() == [
        ("cancelled", "4242.0", "gpu-b-03", None, None, "NODE FAILURE"),
        ("cancelled", "4243", "gpu-b-04", None, None, "PREEMPTION"),
        ("stepd_terminated", "4242.0", "gpu-b-03", None, None, "JOB NOT ENDING WITH SIGNALS"),
        ("task_exit", None, "gpu-b-03", "0-3,5", None, "Killed"),
        ("task_exit", None, "gpu-b-04", "12", None, "Segmentation fault (core dumped)"),
        ("oom_kill", "4242.batch", None, None, None, "2 oom_kill event(s)"),
    ]
    assert slurm["ts"][0] == datetime(2026, 7, 24, 13, 22, 5)


def test_real_elastic_failure_summary():
    result = torchrun.parse(_env(real("training/pytorch-issue-121209-elastic-failure-summary.log")))
    exits = result.tables["exits"].sort("rank")
    assert exits.select("rank", "local_rank", "exitcode", "pid", "root_cause").rows() == [
        (0, 0, 1, 69811, True),
        (1, 1, 1, 69812, False),
        (2, 2, 1, 69813, False),
        (3, 3, 1, 69814, False),
    ]
    assert set(exits["host"]) == {"vmnuvocinpoc.internal.cloudapp.net"}
    # the paste starts inside block [1]: its `[1]:` and `time` lines are cut off
    assert exits.filter(rank=1)["block_index"].to_list() == [None]
    assert exits.filter(rank=0)["time"].to_list() == [datetime(2024, 3, 5, 7, 1, 51)]
    assert exits["signal"].null_count() == 4
    assert exits["traceback"][0].startswith("To enable traceback see:")


def test_real_slurm_time_limit():
    result = torchrun.parse(_env(real("training/zetta-utils-issue-671-slurm-time-limit.log")))
    slurm = result.tables["slurm"]
    assert slurm.select("kind", "job_id", "reason").rows() == [
        ("step_aborted", None, "Waiting up to 47 seconds for job step to finish."),
        ("cancelled", "494583", "TIME LIMIT"),
        ("cancelled", "494583.0", "TIME LIMIT"),
    ]
    assert slurm["ts"].to_list() == [None, datetime(2024, 4, 20, 9, 9, 37), datetime(2024, 4, 20, 9, 9, 37)]
    assert set(result.consumed.to_list()) == {1, 2, 3}


def test_no_false_positives_in_other_real_logs():
    if not REAL.is_dir():
        pytest.skip("real data not present")
    mine = {"pytorch-issue-121209-elastic-failure-summary.log", "zetta-utils-issue-671-slurm-time-limit.log"}
    for path in sorted(REAL.glob("*/*.log")):
        if path.name in mine:
            continue
        result = torchrun.parse(bare(path.read_bytes()))
        assert result.tables["exits"].is_empty(), path.name
        assert result.tables["slurm"].is_empty(), path.name


def test_garbage_returns_empty_tables():
    rng = random.Random(0)
    junk = rng.randbytes(100_000) + b"\n" + b"x" * (1 << 20)
    for frame in (_env(b""), _env(junk), bare(junk), bare(b"\n" * 100), bare(b"|" * 100_000)):
        result = torchrun.parse(frame)
        for name, schema in (("exits", torchrun.EXITS_SCHEMA), ("agent", torchrun.AGENT_SCHEMA),
                             ("slurm", torchrun.SLURM_SCHEMA)):
            assert result.tables[name].is_empty() and dict(result.tables[name].schema) == schema
        assert result.consumed.is_empty()


def test_huge_and_negative_numbers_become_null():
    text = (
        "[0]:\n"
        "  rank      : 99999999999999999999999 (local_rank: 1)\n"
        "  exitcode  : -99999999999999999999 (pid: 12)\n"
        "failed (exitcode: 99999999999999999999) local_rank: 0 (pid: 1) of binary: x\n"
        "srun: error: h: task 0: Exited with exit code 99999999999999999999\n"
    )
    result = torchrun.parse(bare(text.encode()))
    (row,) = result.tables["exits"].to_dicts()
    assert row["rank"] is None and row["exitcode"] is None and row["pid"] == 12 and row["signal"] is None
    assert result.tables["agent"]["exitcode"].to_list() == [None]
    assert result.tables["slurm"]["exit_code"].to_list() == [None]
