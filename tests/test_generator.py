"""The run generator writes the folders the stories promise, in every layout and era.

These are structural checks on the written bytes (files, counts, who printed what), read back
with small regexes written here -- independent of the project's parsers.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from bench.generator import RunSpec, generate_run, main

TIMEOUT = re.compile(r"ProcessGroupNCCL\.cpp:\d+\] \[Rank (\d+)\] Watchdog caught collective operation timeout: "
                     r"WorkNCCL\(SeqNum=(\d+), OpType=(\w+), NumelIn=(\d+), NumelOut=(\d+), Timeout\(ms\)=(\d+)\) "
                     r"ran for (\d+) milliseconds")
DUMP = re.compile(r"Received a dump signal due to a collective timeout from( this local rank| +rank \d+)"
                  r" and we will try our best to dump the debug info\. Last enqueued NCCL work: (-?\d+), "
                  r"last completed NCCL work: (-?\d+)\.")
SRUN_LABEL = re.compile(r"^\s*(\d+): (.*)$")
TORCHRUN_PREFIX = re.compile(r"^\s*(\d+): \[default(\d+)\]:(.*)$")


def rank_lines(out: Path, truth: dict, launcher: str, gpus_per_node: int = 8) -> dict[int, list[str]]:
    """Every line of the analysed attempt, per global rank, whatever the layout."""
    per_rank: dict[int, list[str]] = {}
    if launcher == "torchrun-logdir":
        attempt = truth["analysed_attempt"]
        for node, host in enumerate(truth["hosts"]):
            for folder in sorted((out / "logs" / host).glob(f"*/attempt_{attempt}/*")):
                rank = node * gpus_per_node + int(folder.name)
                for name in ("stdout.log", "stderr.log"):
                    per_rank.setdefault(rank, []).extend((folder / name).read_text().splitlines())
        return per_rank
    text = (out / "slurm-4242.out").read_text()
    for line in text.splitlines():
        if launcher == "srun-torchrun":
            match = TORCHRUN_PREFIX.match(line)
            if match:
                rank = int(match.group(1)) * gpus_per_node + int(match.group(2))
                per_rank.setdefault(rank, []).append(match.group(3))
        else:
            match = SRUN_LABEL.match(line)
            if match:
                per_rank.setdefault(int(match.group(1)), []).append(match.group(2))
    return per_rank


def timeouts(lines: list[str]) -> list[re.Match]:
    return [m for m in (TIMEOUT.search(line) for line in lines) if m]


def root_causes(out: Path) -> list[int]:
    """The rank of each "Root Cause (first observed failure)" block in the Slurm output."""
    lines = [SRUN_LABEL.sub(r"\2", line) for line in (out / "slurm-4242.out").read_text().splitlines()]
    ranks = []
    for i, line in enumerate(lines):
        if line == "Root Cause (first observed failure):":
            rank_line = next(l for l in lines[i + 1:i + 6] if l.startswith("  rank      :"))
            ranks.append(int(rank_line.split(":")[1].split()[0]))
    return ranks


def all_bytes(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


# -- the deadlock story, per launcher and era ------------------------------------------------------

@pytest.mark.parametrize("launcher", ["torchrun-logdir", "srun-per-gpu", "srun-torchrun"])
@pytest.mark.parametrize("era", ["2.1", "2.4", "2.8"])
def test_deadlock_culprit_never_times_out(tmp_path: Path, launcher: str, era: str) -> None:
    spec = RunSpec(nodes=2, culprit=9, launcher=launcher, torch_era=era)
    truth = generate_run(tmp_path, spec)
    per_rank = rank_lines(tmp_path, truth, launcher)
    assert sorted(per_rank) == list(range(16))
    assert not timeouts(per_rank[9]), "the culprit never enqueued the collective: no timeout of its own"
    timed_out = {r for r, lines in per_rank.items() if timeouts(lines)}
    assert timed_out == set(truth["timed_out_ranks"])
    assert truth["first_detector"] in timed_out and truth["first_detector"] != 9
    if launcher != "srun-per-gpu" or era != "2.1":
        # Every waiting rank times out before anyone is torn down (2.1 + srun --kill-on-bad-exit
        # is the exception: the step dies milliseconds after the first abort).
        assert timed_out == set(range(16)) - {9}
    for match in (m for r in timed_out for m in timeouts(per_rank[r])):
        assert (match.group(2), match.group(3), match.group(4)) == ("7219", "_ALLGATHER_BASE", "8069120")
        assert match.group(5) == str(8069120 * 16)
        assert int(match.group(7)) >= 600000
    assert 9 not in root_causes(tmp_path)


@pytest.mark.parametrize("era", ["2.3", "2.6", "2.8"])
def test_dump_signal_names_the_first_detector_and_the_culprit_is_behind(tmp_path: Path, era: str) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, culprit=9, torch_era=era))
    per_rank = rank_lines(tmp_path, truth, "torchrun-logdir")
    first = truth["first_detector"]
    for rank, lines in per_rank.items():
        signals = [m for m in (DUMP.search(line) for line in lines) if m]
        assert len(signals) == 1, rank
        source, enqueued, completed = signals[0].groups()
        if rank == first:
            assert source == " this local rank"
        else:
            assert source == f"  rank {first}"      # sic: "from  rank" has two spaces in the real message
        expected = ("7218", "7218") if rank == 9 else ("7219", "7218")
        assert (enqueued, completed) == expected, rank
    prefix = "[rank9]:" if era != "2.1" else ""
    assert all(line.startswith(prefix) for line in per_rank[9] if "ProcessGroupNCCL.cpp" in line)


def test_2_1_has_no_rank_prefix_no_date_and_no_dump_signal(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=1, culprit=3, torch_era="2.1"))
    lines = [line for lines in rank_lines(tmp_path, truth, "torchrun-logdir").values() for line in lines]
    c10d = [line for line in lines if re.search(r"ProcessGroupNCCL\.cpp:\d+\]", line)]
    assert c10d and all(line.startswith("[E ProcessGroupNCCL.cpp:") for line in c10d)
    assert not any("dump signal" in line for line in lines)


def test_status_line_wording_per_era(tmp_path: Path) -> None:
    wording = {"2.3": "] Timeout at NCCL work: 7219, last enqueued NCCL work: 7219, last completed NCCL work: 7218.",
               "2.4": "Rank 1] Exception (either an error or timeout) detected by watchdog at work: 7219,",
               "2.6": "[PG ID 0 PG GUID 0(default_pg) Rank 1] Exception (either an error or timeout)",
               "2.8": "Rank 1]  failure detected by watchdog at work sequence id: 7219 PG status: "
                      "last enqueued work: 7219, last completed work: 7218"}
    for era, needle in wording.items():
        out = tmp_path / era
        truth = generate_run(out, RunSpec(nodes=1, culprit=3, torch_era=era))
        assert any(needle in line for line in rank_lines(out, truth, "torchrun-logdir")[1]), era
    assert "[PG 0 (default_pg) Rank 1]" in "\n".join(rank_lines(tmp_path / "2.4", truth, "torchrun-logdir")[1])


def test_one_child_failed_table_per_node_and_culprit_killed_by_its_agent(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(culprit=17), write_truth=True)   # the 40-rank model job
    assert truth["world_size"] == 40 and truth["culprit_host"] == "h20-node-03"
    assert truth["culprit_bus_id"] == "2a000" and truth["culprit_local_rank"] == 1
    text = (tmp_path / "slurm-4242.out").read_text()
    assert text.count("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n") == 5
    assert len(root_causes(tmp_path)) == 5 and 17 not in root_causes(tmp_path)
    assert f"Sending process {truth['culprit_pid']} closing signal SIGTERM" in text
    assert truth["exit_codes"][17] == -15
    assert json.loads((tmp_path / ".truth.json").read_text())["culprit_rank"] == 17
    pyspy = tmp_path / "pyspy" / "h20-node-03" / f"py-spy-{truth['culprit_pid']}.txt"
    assert "_init_group (torch/optim/adam.py:" in pyspy.read_text()
    assert len(list((tmp_path / "pyspy").rglob("py-spy-*.txt"))) == 40
    assert sorted(p.name for p in (tmp_path / "env").iterdir()) == [f"h20-node-0{i}.env" for i in range(1, 6)]
    assert "NCCL_IB_GID_INDEX=3" in (tmp_path / "env" / "h20-node-01.env").read_text()


def test_truth_is_not_written_unless_asked(tmp_path: Path) -> None:
    generate_run(tmp_path, RunSpec(nodes=1, culprit=2))
    assert not (tmp_path / ".truth.json").exists()


# -- silent hang -------------------------------------------------------------------------------

def test_silent_hang_has_no_timeouts_and_ends_with_a_cancel(tmp_path: Path) -> None:
    spec = RunSpec(nodes=2, culprit=9, timeout_s=36000, work_updates=True, hang_duration_s=3600)
    truth = generate_run(tmp_path, spec)
    per_rank = rank_lines(tmp_path, truth, "torchrun-logdir")
    assert not any(timeouts(lines) for lines in per_rank.values())
    assert not truth["watchdog_fired"] and truth["first_detector"] is None
    text = (tmp_path / "slurm-4242.out").read_text()
    assert re.search(r"^slurmstepd: error: \*\*\* JOB 4242 ON h20-node-01 CANCELLED AT 2026-07-24T\d\d:\d\d:\d\d \*\*\*$",
                     text, re.M)
    assert "SignalException: Process" in text and "ChildFailedError" not in text
    updates = {r: [l for l in lines if "(default_pg) Rank" in l and "Work update periodically" in l]
               for r, lines in per_rank.items()}
    assert updates[9][-1].endswith("last enqueued NCCL work: 7218, last completed NCCL work: 7218.")
    assert updates[4][-1].endswith("last enqueued NCCL work: 7219, last completed NCCL work: 7218.")
    last_stdout = next((tmp_path / "logs" / "h20-node-02").glob("*/attempt_0/7/stdout.log")).read_bytes()
    assert not last_stdout.endswith(b"\n"), "the last rank's stdout was torn by the kill"


# -- the other scenarios --------------------------------------------------------------------------

@pytest.mark.parametrize("launcher", ["torchrun-logdir", "srun-per-gpu", "srun-torchrun"])
def test_desync_culprit_times_out_with_its_own_op(tmp_path: Path, launcher: str) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, culprit=9, scenario="desync-op", launcher=launcher))
    per_rank = rank_lines(tmp_path, truth, launcher)
    culprit = timeouts(per_rank[9])
    assert culprit and culprit[0].group(3) == "BROADCAST"
    assert all(m.group(3) == "_ALLGATHER_BASE" for r in range(16) if r != 9 for m in timeouts(per_rank[r]))
    assert truth["first_detector"] != 9 and 9 not in root_causes(tmp_path)


def test_desync_size_differs_only_in_numel(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, culprit=3, scenario="desync-size", torch_era="2.6"))
    per_rank = rank_lines(tmp_path, truth, "torchrun-logdir")
    sizes = {r: timeouts(lines)[0].group(4) for r, lines in per_rank.items() if timeouts(lines)}
    assert len(sizes) == 16 and sizes[3] != "8069120" and set(sizes.values()) - {sizes[3]} == {"8069120"}


def test_all_stuck_everyone_waits_and_one_node_warns(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, scenario="all-stuck", launcher="srun-per-gpu", torch_era="2.8"))
    assert truth["culprit_rank"] is None and truth["fault_host"] == "h20-node-02"
    text = (tmp_path / "slurm-4242.out").read_text().splitlines()
    warns = [i for i, line in enumerate(text) if "NCCL WARN NET/IB" in line]
    assert warns and all(re.fullmatch(r"\s*\d+: ", text[i - 1]) for i in warns), "an empty line precedes each WARN"
    assert len(set(truth["timed_out_ranks"])) == 16


def test_healthy_run_trains_to_the_end(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, scenario="healthy", launcher="srun-torchrun"))
    text = (tmp_path / "slurm-4242.out").read_text()
    assert "Watchdog caught" not in text and "ChildFailedError" not in text and "NCCL WARN" not in text
    assert len(re.findall(r"\] iteration +\d+/ +60 \|", text)) == 60
    assert text.count("worker group successfully finished") == 2
    assert set(truth["exit_codes"].values()) == {0}


def test_node_group_hang_is_in_the_expert_group(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, culprit=9, group="node", torch_era="2.6"))
    assert truth["pg_desc"] == "EXPERT_MODEL_PARALLEL_GROUP" and truth["hang_seq"] == 3841
    per_rank = rank_lines(tmp_path, truth, "torchrun-logdir")
    ep = [m for r in range(8, 16) for m in timeouts(per_rank[r])]
    assert {m.group(2) for m in ep} == {"3841"} and {int(m.group(1)) for m in ep} == set(range(8)) - {1}
    assert any("[PG ID 2 PG GUID 6(EXPERT_MODEL_PARALLEL_GROUP) Rank 0] Exception" in line for line in per_rank[8])
    downstream = [m for r in range(8) for m in timeouts(per_rank[r])]
    assert downstream and {(m.group(2), m.group(3)) for m in downstream} == {("7219", "ALLREDUCE")}


# -- attempts, layouts, NCCL ---------------------------------------------------------------------

def test_torchrun_restarts_make_attempt_folders(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, culprit=9, attempts=3))
    assert truth["analysed_attempt"] == 2 and len(truth["earlier_failures"]) == 2
    for host in truth["hosts"]:
        assert sorted(p.name for p in (tmp_path / "logs" / host).glob("*/attempt_*")) == [
            "attempt_0", "attempt_1", "attempt_2"]
    victim = truth["earlier_failures"][0]
    node = truth["hosts"].index(victim["host"])
    stderr = next((tmp_path / "logs" / victim["host"]).glob(f"*/attempt_0/{victim['rank'] - 8 * node}/stderr.log"))
    assert "OutOfMemoryError: CUDA out of memory." in stderr.read_text()
    assert "Worker group FAILED. 2/2 attempts left; will restart worker group" in (tmp_path / "slurm-4242.out").read_text()


@pytest.mark.parametrize("launcher", ["srun-per-gpu", "srun-torchrun"])
def test_requeued_attempts_append_a_fresh_nccl_banner(tmp_path: Path, launcher: str) -> None:
    generate_run(tmp_path, RunSpec(nodes=1, culprit=3, attempts=2, launcher=launcher))
    text = (tmp_path / "slurm-4242.out").read_text()
    assert len(re.findall(r"^\s*0: (?:\[default0\]:)?NCCL version 2\.21\.5\+cuda12\.4$", text, re.M)) == 2


def test_srun_labels_are_right_aligned(tmp_path: Path) -> None:
    generate_run(tmp_path, RunSpec(culprit=17, launcher="srun-per-gpu", pyspy=False))
    labels = {line.split(":")[0] for line in (tmp_path / "slurm-4242.out").read_text().splitlines()
              if SRUN_LABEL.match(line)}
    assert " 3" in labels and "39" in labels and "3" not in labels


@pytest.mark.parametrize("version, start, complete", [
    ("2.18.3", "comm 0x", "commId 0x"),
    ("2.21.5", "ncclCommInitRank comm 0x", "ncclCommInitRank comm 0x"),
    ("2.23.4", "ncclCommInitRankConfig comm 0x", "ncclCommInitRankConfig comm 0x"),
])
def test_nccl_init_lines_follow_the_version(tmp_path: Path, version: str, start: str, complete: str) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=2, culprit=9, nccl_version=version, scenario="healthy"))
    lines = rank_lines(tmp_path, truth, "torchrun-logdir")[9]
    starts = [l for l in lines if l.endswith("- Init START")]
    completes = [l for l in lines if l.endswith("- Init COMPLETE")]
    assert len(starts) == 2 and len(completes) == 2       # the world comm and the EP comm
    assert re.match(r"h20-node-02:\d+:\d+ \[1\] NCCL INFO ", starts[0])
    assert start in starts[0] and complete in completes[0]
    assert "rank 9 nranks 16 cudaDev 1 nvmlDev 1 busId 2a000" in completes[0]
    layout = "comm " + completes[0].split("comm ")[1].split()[0] + " rank 9 nRanks 16 nNodes 2 localRanks 8 localRank 1 MNNVL 0"
    assert any(l.endswith(layout) for l in lines) == (version >= "2.20")
    assert any("[send] via NET/IB/7/GDRDMA" in l for l in rank_lines(tmp_path, truth, "torchrun-logdir")[7])
    version_lines = [l for l in lines if "NCCL version" in l]
    assert bool(version_lines) == (version >= "2.22")     # bare, rank-0-only line before 2.22


def test_no_nccl_debug_means_no_nccl_lines(tmp_path: Path) -> None:
    truth = generate_run(tmp_path, RunSpec(nodes=1, culprit=3, nccl_debug=False))
    assert not any("NCCL INFO" in l for lines in rank_lines(tmp_path, truth, "torchrun-logdir").values() for l in lines)
    assert "NCCL_DEBUG" not in (tmp_path / "env" / "h20-node-01.env").read_text()


# -- determinism, sizes, CLI ------------------------------------------------------------------------

def test_same_seed_same_bytes_other_seed_other_bytes(tmp_path: Path) -> None:
    spec = dict(nodes=2, culprit=9, work_updates=True, attempts=2, launcher="srun-torchrun")
    generate_run(tmp_path / "a", RunSpec(**spec))
    generate_run(tmp_path / "b", RunSpec(**spec))
    generate_run(tmp_path / "c", RunSpec(**spec, seed=1))
    assert all_bytes(tmp_path / "a") == all_bytes(tmp_path / "b")
    assert all_bytes(tmp_path / "a") != all_bytes(tmp_path / "c")


@pytest.mark.parametrize("ranks", [8, 40, 128])
def test_world_sizes(tmp_path: Path, ranks: int) -> None:
    culprit = min(17, ranks - 3)
    truth = generate_run(tmp_path, RunSpec(nodes=ranks // 8, culprit=culprit, launcher="srun-per-gpu", pyspy=False))
    per_rank = rank_lines(tmp_path, truth, "srun-per-gpu")
    assert sorted(per_rank) == list(range(ranks))
    assert len(truth["exit_codes"]) == ranks and truth["exit_codes"][culprit] == -15
    assert any(f"nranks {ranks} cudaDev" in line for line in per_rank[ranks - 1])


def test_cli_writes_a_run_and_prints_the_truth(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--ranks", "16", "--scenario", "deadlock", "--torch-era", "2.4",
                 "--launcher", "srun-torchrun", "--no-pyspy", "--write-truth"]) == 0
    truth = json.loads(capsys.readouterr().out)
    assert truth["world_size"] == 16 and truth["culprit_rank"] == 9      # default for a small world
    assert (tmp_path / "slurm-4242.out").exists() and (tmp_path / ".truth.json").exists()


def test_cli_help_explains_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    for option in ("--scenario", "--culprit", "--ranks", "--torch-era", "--launcher", "--nccl-version",
                   "--timeout-s", "--hang-duration-s", "--work-updates", "--attempts", "--group", "--seed"):
        assert option in text


def test_bad_specs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="outside a world"):
        generate_run(tmp_path, RunSpec(nodes=1))              # culprit 17 in an 8-rank world
    with pytest.raises(ValueError, match="torch era"):
        generate_run(tmp_path, RunSpec(nodes=1, culprit=1, torch_era="1.13"))
    with pytest.raises(ValueError, match="NCCL"):
        generate_run(tmp_path, RunSpec(nodes=1, culprit=1, nccl_version="2.4.8"))
