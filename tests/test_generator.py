"""The run generator writes the folders the stories promise, in every layout and era.

These are structural checks on the written bytes (files, counts, who printed what), read back
with small regexes written here -- independent of the project's parsers.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from postmortem.generator import RunSpec, generate_run, main

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
        generate_run(tmp_path, RunSpec(nodes=1, culprit=1, nccl_version="2.3.7"))      # 2.4 is the oldest


# -- NCCL output per version family --------------------------------------------------------------
#
# Regexes written from NCCL's printf formats (docs/formats/nccl.md sections 1, 3.1-3.9, 3.14), not from
# the generator. Runs are 2 nodes x 4 GPUs: a world comm of 8 ranks and one 4-rank expert comm per
# node, so every process prints two communicators.

NCCL_LINE = re.compile(r"^(?:\[(?P<ts>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] )?(?P<host>[^:\s]*):(?P<pid>\d+):(?P<tid>\d+) "
                       r"\[(?P<dev>\d+)\] (?:(?P<file>\S+):(?P<fline>\d+)(?: \((?P<func>[^)]*)\))? )?"
                       r"NCCL (?P<level>INFO|WARN) (?P<msg>.*)$")
BARE_VERSION = re.compile(r"^NCCL version 2\.\d+\.\d+\+cuda\d+\.\d+$")
CONN = re.compile(r"^(?P<word>Ring|Channel) (?P<ch>\d\d)(?:/(?P<ci>\d))? : (?P<src>\d+)(?:\[(?P<sdev>[0-9a-f]+)\])? -> "
                  r"(?P<dst>\d+)(?:\[(?P<ddev>[0-9a-f]+)\])? (?:\[(?P<side>send|receive)\] )?via (?P<via>.+)$")
NET_VIA = re.compile(r"^NET/(?P<net>IB|Socket|AWS Libfabric)/(?P<nic>\d+)(?:\((?P<pxn>\d+)\))?(?P<gdr>/GDRDMA)?"
                     r"(?P<shared>/Shared)?$")
BUS_IDS = {"18000", "2a000", "3a000", "5d000"}
FAMILIES = ["2.4.8", "2.5.6", "2.6.4", "2.7.8", "2.8.4", "2.11.4", "2.12.12", "2.13.4", "2.14.3", "2.17.1", "2.18.3",
            "2.19.3", "2.20.5", "2.21.5", "2.22.3", "2.23.4", "2.24.3", "2.25.1", "2.26.2", "2.27.7", "2.28.3",
            "2.29.7", "2.30.7"]
SMALL = dict(nodes=2, gpus_per_node=4, culprit=5, pyspy=False, iterations_before_hang=3)


def nccl_run(out: Path, **kwargs) -> tuple[dict, list[dict], list[str]]:
    """Generate a small run; return the truth, every NCCL INFO/WARN line (parsed, in file order,
    with its file) and the bare version lines, from the per-rank files or the Slurm output."""
    spec = dict(SMALL, **kwargs)
    truth = generate_run(out, RunSpec(**spec))
    files = sorted((out / "logs").rglob("*.log")) if spec.get("launcher", "torchrun-logdir") == "torchrun-logdir" \
        else [out / "slurm-4242.out"]
    lines, bare = [], []
    for f in files:
        for raw in f.read_text().splitlines():
            text = SRUN_LABEL.sub(r"\2", raw) if f.name.endswith(".out") else raw
            m = NCCL_LINE.match(text)
            if m:
                lines.append(dict(m.groupdict(), pid=int(m["pid"]), tid=int(m["tid"]), path=str(f)))
            elif BARE_VERSION.match(text):
                bare.append(text)
    return truth, lines, bare


def minor_of(version: str) -> int:
    return int(version.split(".")[1])


def messages(lines: list[dict], pattern: str) -> list[str]:
    return [m["msg"] for m in lines if re.search(pattern, m["msg"])]


def transport_of(via: str) -> str:
    return "NET" if via.startswith("NET/") else "P2P" if via.startswith("P2P/") else "SHM"


@pytest.mark.parametrize("version", FAMILIES)
def test_nccl_lines_follow_the_version_family(tmp_path: Path, version: str) -> None:
    minor = minor_of(version)
    truth, lines, bare = nccl_run(tmp_path, nccl_version=version, nccl_connections="full")
    procs = {(m["host"], m["pid"]) for m in lines}
    assert len(procs) == 8

    # 3.1 version line: bare and rank-0-only before 2.22, an INFO line of every process from 2.22.
    info_versions = messages(lines, r"^NCCL version ")
    if minor >= 22:
        assert not bare and len(info_versions) == 8
        assert all(re.fullmatch(rf"NCCL version {re.escape(version)}\+cuda\d+\.\d+", t) for t in info_versions)
    else:
        assert not info_versions and len(bare) == 1 and bare[0].startswith(f"NCCL version {version}+cuda")
    assert bool(messages(lines, r"^cudaDriverVersion \d+$")) == (minor >= 13)

    # 3.2 bootstrap: [i]name:addr<port> list 2.4-2.7, the chosen interface 2.8+, "Bootstrap:" 2.24+.
    boot = {False: r"^Bootstrap : Using \[0\]eth0:10\.20\.1\.1[12]<0>$",
            True: r"^Bootstrap : Using eth0:10\.20\.1\.1[12]<0>$"}[minor >= 8]
    if minor >= 24:
        boot = r"^Bootstrap: Using eth0:10\.20\.1\.1[12]<0>$"
    assert len(messages(lines, r"^Bootstrap ?:")) == 8 and len(messages(lines, boot)) == 8

    # 3.3 plugin wording (no plugin installed) and network selection.
    plugin = sorted(set(messages(lines, r"^NET/Plugin")))
    missing = "libnccl-net.so: cannot open shared object file: No such file or directory"
    expected_plugin = (
        ["NET/Plugin : No plugin found (libnccl-net.so)."] if minor == 4 else
        ["NET/Plugin : No plugin found (libnccl-net.so), using internal implementation"] if minor <= 11 else
        [f"NET/Plugin : Plugin load (libnccl-net.so) returned 2 : {missing}",
         "NET/Plugin : No plugin found, using internal implementation"] if minor <= 18 else
        [f"NET/Plugin : dlerror={missing} No plugin found (libnccl-net.so), using internal implementation"] if minor <= 20 else
        ["NET/Plugin: No plugin found (libnccl-net.so)", "NET/Plugin: Using internal network plugin.",
         f"NET/Plugin: Plugin load returned 2 : {missing} : when loading libnccl-net.so"] if minor <= 22 else
        ["NET/Plugin: Could not find: libnccl-net.so. Using internal network plugin."] if minor <= 25 else
        ["NET/Plugin: Could not find: libnccl-net.so. Using internal net plugin."] if minor == 26 else
        ["NET/Plugin: Could not find: libnccl-net.so."])
    assert plugin == sorted(expected_plugin)
    nic_list = (r"^NET/IB : Using(?: \[\d+\]mlx5_\d+:1/RoCE)+ ; OOB eth0:10\.20\.1\.1[12]<0>$" if minor < 12 else
                r"^NET/IB : Using(?: \[\d+\]mlx5_\d+:1/RoCE)+ \[RO\]; OOB eth0:10\.20\.1\.1[12]<0>$")
    assert len(messages(lines, r"^NET/IB : Using")) == 8 and len(messages(lines, nic_list)) == 8
    assert len(messages(lines, r"^Using network IB$")) == (8 if minor >= 6 else 0)

    # 3.5 Init START (2.18.3+) / COMPLETE in every release's shape (with the 3.14.7 corrections).
    starts, completes = messages(lines, r"- Init START$"), messages(lines, r"Init COMPLETE$")
    assert len(starts) == (16 if minor >= 18 else 0) and len(completes) == 16
    comm = r"comm 0x[0-9a-f]+ rank \d+ nranks \d+ cudaDev \d+"
    complete = (rf"^{comm} nvmlDev \d+ - Init COMPLETE$" if minor == 4 else
                rf"^{comm} busId [0-9a-f]+ - Init COMPLETE$" if minor <= 15 else
                rf"^{comm} busId [0-9a-f]+ commId 0x[0-9a-f]+ - Init COMPLETE$" if minor <= 17 else
                rf"^{comm} nvmlDev \d+ busId [0-9a-f]+ commId 0x[0-9a-f]+ - Init COMPLETE$" if minor <= 20 else
                rf"^(?:ncclCommInitRank|ncclCommSplit) {comm} nvmlDev \d+ busId [0-9a-f]+ commId 0x[0-9a-f]+ - Init COMPLETE$"
                if minor <= 22 else
                rf"^(?:ncclCommInitRankConfig {comm} nvmlDev \d+ busId [0-9a-f]+ commId 0x[0-9a-f]+|ncclCommSplit {comm} "
                rf"nvmlDev \d+ busId [0-9a-f]+ parent 0x[0-9a-f]+{'' if minor == 23 else ' splitCount 1' if minor < 29 else ' childCount 1'}"
                rf" color \d+ key \d+) - Init COMPLETE$")
    assert all(re.match(complete, t) for t in completes), completes[:2]
    if minor >= 23:
        split_start = rf"parent 0x[0-9a-f]+{'' if minor == 23 else ' splitCount 1' if minor < 29 else ' childCount 1'} color \d+ key \d+- Init START$"
        assert len([t for t in starts if re.search(split_start, t)]) == 8
    assert [t.startswith("[Rank ") for t in starts] == [minor >= 29] * len(starts)
    layout = r"^comm 0x[0-9a-f]+ rank \d+ nRanks \d+ nNodes [12] localRanks 4 localRank \d MNNVL 0$"
    assert len(messages(lines, layout)) == (16 if minor >= 20 else 0)

    # 3.6 ring order (rank 0 of each comm), trees, thresholds, channel counts.
    order = (r"^Channel (\d\d) : ((?: [ \d]{2}\d)+)$" if minor == 4 else
             r"^Channel (\d\d)/08 : ((?: [ \d]{2}\d)+)$" if minor <= 22 else r"^Channel (\d\d)/08 : (\d(?: \d)*)$")
    printed: dict[int, list[list[int]]] = {}
    for m in lines:
        o = re.match(order, m["msg"])
        if o:
            body = o.group(2)
            ranks = [int(x) for x in body.split()] if minor >= 23 else [int(body[i:i + 4]) for i in range(0, len(body), 4)]
            printed.setdefault(m["pid"], []).append(ranks)
    rings = {(r["comm"], r["channel"]): r["order"] for r in truth["nccl"]["rings"]}
    expected_orders: dict[int, list[list[int]]] = {}
    for c in truth["nccl"]["comms"]:
        expected_orders.setdefault(c["members"][0]["pid"], []).extend(rings[(c["key"], ch)] for ch in range(8))
    assert printed == expected_orders
    assert any(r != sorted(r) for r in rings.values()), "some rings do not follow rank order"
    tree = (r"(?: \[\d\] -?\d+->\d+->-?\d+/-?\d+/-?\d+)+" if minor == 4 else
            r"(?: \[\d\] -?\d+/-?\d+/-?\d+->\d+->-?\d+\|-?\d+->\d+->-?\d+/-?\d+/-?\d+)+" if minor <= 7 else
            r"(?: \[\d\] -?\d+/-?\d+/-?\d+->\d+->-?\d+)+")
    trees = messages(lines, r"^Trees")
    assert len(trees) == (8 if minor == 4 else 16) and all(re.fullmatch("Trees" + tree, t) for t in trees)
    thresholds = messages(lines, r"^threadThresholds")
    shape = (None if minor == 4 else r"^threadThresholds 8/8/64 \| (64|32)/8/64$" if minor == 5 else
             r"^threadThresholds 8/8/64 \| (64|32)/8/64 \| 8/8/512$" if minor <= 13 else
             r"^threadThresholds 8/8/64 \| (64|32)/8/64 \| 512 \| 512$")
    if shape:
        assert len(thresholds) == 16 and all(re.match(shape, t) for t in thresholds)
    else:
        assert not thresholds and len(messages(lines, r"^Using \d+ threads, Min Comp Cap \d+, Trees (disabled|enabled)")) == 3
    counts = messages(lines, r"coll channels")
    count_shape = (r"^8 coll channels, 8 p2p channels, 2 p2p channels per peer$" if minor <= 16 else
                   r"^8 coll channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer$" if minor <= 19 else
                   r"^8 coll channels, 0 collnet channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer$"
                   if minor == 20 else
                   r"^8 coll channels, 8 collnet channels, 0 nvls channels, 8 p2p channels, 2 p2p channels per peer$")
    assert len(counts) == (0 if minor < 7 else 16) and all(re.match(count_shape, t) for t in counts)
    timings = messages(lines, r"^Init timings")
    timing_shape = r"^Init timings: rank \d nranks \d total " if minor == 22 else \
        r"^Init timings - (ncclCommInitRankConfig|ncclCommSplit): rank \d nranks \d total \d+\.\d\d \(kernels "
    assert len(timings) == (16 if minor >= 22 else 0) and all(re.match(timing_shape, t) for t in timings)
    assert len(messages(lines, r"^NCCL_SOCKET_IFNAME set by environment to eth0$")) == 8
    assert len(messages(lines, r"^NCCL_IB_GID_INDEX set by environment to 3\.$")) == 8

    # 3.7 connection lines: Ring vs Channel, connection index, [busId]/[dev], via text, markers.
    conns = [(m, CONN.match(m["msg"])) for m in lines]
    conns = [(m, c) for m, c in conns if c]
    assert conns
    for m, c in conns:
        kind = transport_of(c["via"])
        assert (c["word"] == "Ring") == (minor < 7), m["msg"]
        assert (c["ci"] is not None) == ((kind == "NET" and minor >= 12) or (kind == "P2P" and minor >= 14)), m["msg"]
        if kind == "NET" and minor == 4:
            assert c["sdev"] is None and c["ddev"] is None
        elif minor == 4 or minor >= 18:
            assert c["sdev"] in "0123" and c["ddev"] in "0123", m["msg"]
        else:
            assert {c["sdev"], c["ddev"]} <= BUS_IDS, m["msg"]
        if kind == "NET":
            net = NET_VIA.match(c["via"])
            assert net and net["net"] == "IB" and net["gdr"] and c["side"] and net["pxn"] is None, m["msg"]
            assert bool(net["shared"]) == (c["ci"] == "1"), m["msg"]
        else:
            assert c["side"] is None
            assert c["via"] == ("P2P/IPC" if minor < 7 else "P2P/IPC/read" if minor < 18 else "P2P/CUMEM/read")
    parsed = Counter((m["host"], m["pid"], int(c["ch"]), None if c["ci"] is None else int(c["ci"]), int(c["src"]),
                      int(c["dst"]), c["side"], transport_of(c["via"])) for m, c in conns)
    recorded = Counter((x["printed_by"]["host"], x["printed_by"]["pid"], x["channel"], x["conn_index"], x["src_rank"],
                        x["dst_rank"], x["side"], x["transport"]) for x in truth["nccl"]["connections"])
    assert parsed == recorded
    kinds = Counter(x["kind"] for x in truth["nccl"]["connections"])
    assert kinds["ring"] and kinds["tree"] and bool(kinds["p2p"]) == (minor >= 12)
    rings_marker = r"^Connected all rings, use ring PXN 0 GDR 1$" if minor >= 24 else r"^Connected all rings$"
    assert len(messages(lines, rings_marker)) == (16 if minor >= 8 else 0)
    assert len(messages(lines, r"^Connected all trees$")) == (16 if minor >= 8 else 0)
    assert truth["nccl"]["version"] == version


def test_2_7_channel_lines_have_bus_ids_and_no_connection_index(tmp_path: Path) -> None:
    _, lines, _ = nccl_run(tmp_path, nccl_version="2.7.8")
    texts = [m["msg"] for m in lines]
    assert any(re.fullmatch(r"Channel 00 : 0\[18000\] -> 1\[2a000\] via P2P/IPC/read", t) for t in texts)
    assert not [t for t in texts if re.match(r"Channel \d\d/\d : ", t)]
    assert any(re.fullmatch(r"Channel \d\d : 3\[5d000\] -> 4\[18000\] \[send\] via NET/IB/3/GDRDMA", t) for t in texts)


def test_2_4_ring_lines_name_no_device_on_net_hops(tmp_path: Path) -> None:
    _, lines, _ = nccl_run(tmp_path, nccl_version="2.4.8")
    texts = [m["msg"] for m in lines]
    assert "Ring 00 : 3 -> 4 [send] via NET/IB/3/GDRDMA" in texts
    assert "Ring 00 : 3 -> 4 [receive] via NET/IB/0/GDRDMA" in texts
    assert "Ring 00 : 0[0] -> 1[1] via P2P/IPC" in texts
    assert not [t for t in texts if t.startswith(("Channel 00/", "Connected all"))]
    assert re.fullmatch(r"comm 0x[0-9a-f]+ rank 0 nranks 8 cudaDev 0 nvmlDev 0 - Init COMPLETE",
                        next(t for t in texts if t.endswith("Init COMPLETE")))


# -- truth["nccl"] -----------------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["2.8.4", "2.21.5", "2.23.4"])
@pytest.mark.parametrize("connections", ["rings", "full"])
def test_nccl_truth_rings_and_hops_agree(tmp_path: Path, version: str, connections: str) -> None:
    truth, lines, bare = nccl_run(tmp_path, nccl_version=version, nccl_connections=connections)
    nccl = truth["nccl"]
    assert set(nccl) == {"version", "lines", "comms", "rings", "connections", "net", "tuning"}
    assert nccl["lines"] == len(lines) + len(bare)
    comms = {c["key"]: c for c in nccl["comms"]}
    assert len(comms) == 3 and sorted(c["nranks"] for c in comms.values()) == [4, 4, 8]
    for c in comms.values():
        assert set(c) == {"key", "comm_id", "nranks", "members"}
        assert [m["rank"] for m in c["members"]] == list(range(c["nranks"]))
        assert all(set(m) == {"rank", "global_rank", "host", "pid", "cuda_dev", "bus_id"} for m in c["members"])
    minor = minor_of(version)
    splits = [c for c in comms.values() if c["nranks"] == 4]
    if minor >= 23:
        assert all(c["comm_id"] is None and re.fullmatch(r"0x[0-9a-f]+/\d+", c["key"]) for c in splits)
    else:
        assert all(c["comm_id"] == c["key"] for c in comms.values()) == (minor >= 16)
    for ring in nccl["rings"]:
        assert sorted(ring["order"]) == list(range(comms[ring["comm"]]["nranks"])) and ring["order"][0] == 0
    assert len(nccl["rings"]) == 3 * 8
    by_hop: dict[tuple, list[dict]] = {}
    for x in nccl["connections"]:
        assert set(x) == {"comm", "channel", "conn_index", "kind", "src_rank", "dst_rank", "src_host", "dst_host",
                          "printed_by", "side", "transport", "detail", "net", "nic", "pxn_via", "gdr", "shared"}
        by_hop.setdefault((x["comm"], x["channel"], x["kind"], x["src_rank"], x["dst_rank"]), []).append(x)
        members = comms[x["comm"]]["members"]
        assert (members[x["src_rank"]]["host"], members[x["dst_rank"]]["host"]) == (x["src_host"], x["dst_host"])
        printer = members[x["dst_rank"] if x["side"] == "receive" else x["src_rank"]]
        assert x["printed_by"] == {"host": printer["host"], "pid": printer["pid"]}
        if x["transport"] == "NET":
            assert x["src_host"] != x["dst_host"] and x["net"] == "IB" and x["gdr"]
        else:
            assert x["src_host"] == x["dst_host"] and x["side"] is None and x["nic"] is None
    for ring in nccl["rings"]:
        order = ring["order"]
        for a, b in zip(order, order[1:] + order[:1]):
            printed = by_hop[(ring["comm"], ring["channel"], "ring", a, b)]
            sides = sorted(str(x["side"]) for x in printed)
            assert sides == (["receive", "send"] if printed[0]["transport"] == "NET" else ["None"])
    kinds = {x["kind"] for x in nccl["connections"]}
    assert kinds == ({"ring"} if connections == "rings" else {"ring", "tree", "p2p"} if minor >= 12 else {"ring", "tree"})
    net = {(n["host"], n["pid"]): n for n in nccl["net"]}
    assert len(net) == 8 and all(n["network"] == "IB" and n["bootstrap_if"] == "eth0" for n in net.values())
    assert all(n["nics"][1] == {"index": 1, "name": "mlx5_1", "port": 1, "link": "RoCE"} for n in net.values())


def test_nccl_truth_counts_lines_of_every_attempt_and_launcher(tmp_path: Path) -> None:
    for launcher in ("torchrun-logdir", "srun-per-gpu"):
        truth, lines, bare = nccl_run(tmp_path / launcher, attempts=2, launcher=launcher, scenario="all-stuck",
                                      nccl_connections="full", nccl_version="2.26.2")
        assert truth["nccl"]["lines"] == len(lines) + len(bare)
        assert len({c["members"][0]["pid"] for c in truth["nccl"]["comms"]}) == 4       # 3 comms x 2 attempts
        assert len(truth["nccl"]["comms"]) == 6
        assert len(messages(lines, r"^NET/IB: Got completion from peer ")) == 3


def test_lazy_p2p_connections_come_from_another_thread(tmp_path: Path) -> None:
    truth, lines, _ = nccl_run(tmp_path, nccl_version="2.22.3", nccl_connections="full")
    init_tid = {(m["pid"]): m["tid"] for m in lines if m["msg"].startswith("ncclCommInitRank comm")}
    p2p = [(m, c) for m in lines for c in [CONN.match(m["msg"])] if c and c["ci"] == "1"]
    assert p2p and all(m["tid"] not in (m["pid"], init_tid[m["pid"]]) for m, _ in p2p)
    rings = [m for m in lines for c in [CONN.match(m["msg"])] if c and c["ci"] == "0"]
    assert rings and all(m["tid"] == m["pid"] for m in rings), "2.22+: rings connect at the first collective"
    assert all(x["conn_index"] == 1 and x["kind"] == "p2p" for x in truth["nccl"]["connections"] if x["kind"] == "p2p")
    assert {x["shared"] for x in truth["nccl"]["connections"] if x["kind"] == "p2p" and x["transport"] == "NET"} == {True}


# -- transports and scenario knobs ----------------------------------------------------------------

def changed_lines(a: Path, b: Path) -> dict[str, tuple[list[str], list[str]]]:
    """Per file (relative path), the lines only in a and the lines only in b."""
    out = {}
    for fa in sorted(a.rglob("*")):
        if not fa.is_file():
            continue
        rel = fa.relative_to(a)
        la, lb = fa.read_text().splitlines(), (b / rel).read_text().splitlines()
        if la != lb:
            out[str(rel)] = ([x for x in la if x not in lb], [x for x in lb if x not in la])
    return out


def test_socket_fabric_changes_only_network_lines(tmp_path: Path) -> None:
    nccl_run(tmp_path / "a", nccl_version="2.21.5")
    truth, lines, _ = nccl_run(tmp_path / "b", nccl_version="2.21.5", nccl_fabric="socket")
    texts = [m["msg"] for m in lines]
    assert len(messages(lines, r"^NCCL_IB_DISABLE set by environment to 1\.$")) == 8
    assert len(messages(lines, r"^NET/Socket : Using \[0\]eth0:10\.20\.1\.1[12]<0>$")) == 8
    assert len(messages(lines, r"^Using network Socket$")) == 8
    assert not [t for t in texts if t.startswith(("NET/IB", "NCCL_IB_HCA", "NCCL_IB_GID_INDEX"))]
    nets = [NET_VIA.match(c["via"]) for t in texts for c in [CONN.match(t)] if c and c["via"].startswith("NET/")]
    assert nets and all(n["net"] == "Socket" and n["nic"] == "0" and not n["gdr"] for n in nets)
    allowed = re.compile(r"NCCL INFO (NET/|Using network|NCCL_IB_|Channel \d\d/0 : .* via NET/)")
    for rel, (old, new) in changed_lines(tmp_path / "a", tmp_path / "b").items():
        assert all(allowed.search(x) for x in old + new), (rel, old, new)
    assert {n["network"] for n in truth["nccl"]["net"]} == {"Socket"}
    assert truth["nccl"]["net"][0]["nics"] == [{"index": 0, "name": "eth0", "port": None, "link": None}]
    assert {x["net"] for x in truth["nccl"]["connections"] if x["transport"] == "NET"} == {"Socket"}
    _, lines, _ = nccl_run(tmp_path / "c", nccl_version="2.8.4", nccl_fabric="socket-nodev")
    assert len(messages(lines, r"^NET/IB : No device found\.$")) == 8 and not messages(lines, r"NCCL_IB_DISABLE")


def test_shm_node_turns_that_nodes_hops_into_shm(tmp_path: Path) -> None:
    nccl_run(tmp_path / "a", nccl_version="2.21.5", nccl_connections="full")
    truth, _, _ = nccl_run(tmp_path / "b", nccl_version="2.21.5", nccl_connections="full", nccl_shm_node=1)
    changes = changed_lines(tmp_path / "a", tmp_path / "b")
    assert changes and all("h20-node-02" in rel for rel in changes)
    disabled = re.compile(r"NCCL INFO P2P is disabled between connected GPUs \d and \d\. You can repress this message "
                          r"with NCCL_IGNORE_DISABLED_P2P=1\.$")
    for old, new in changes.values():
        assert all(x.endswith("via P2P/CUMEM/read") for x in old), old
        assert all(disabled.search(x) or re.search(r"NCCL INFO Channel \d\d : \d\[\d\] -> \d\[\d\] via SHM/direct/direct$", x)
                   for x in new), new
        assert any(disabled.search(x) for x in new)
    intra = [x for x in truth["nccl"]["connections"] if x["transport"] != "NET"]
    assert {x["transport"] for x in intra if x["src_host"] == "h20-node-02"} == {"SHM"}
    assert {x["transport"] for x in intra if x["src_host"] == "h20-node-01"} == {"P2P"}
    assert all(x["detail"] == "direct/direct" and x["conn_index"] is None for x in intra if x["transport"] == "SHM")
    _, old, _ = nccl_run(tmp_path / "c", nccl_version="2.8.4", nccl_shm_node=0)
    refused = messages(old, r"^Could not enable P2P between dev \d\(=[0-9a-f]+\) and dev \d\(=[0-9a-f]+\)$")
    shm = messages(old, r"^Channel \d\d : \d\[[0-9a-f]+\] -> \d\[[0-9a-f]+\] via direct shared memory$")
    assert refused and len(refused) == len(shm) and not messages(old, r"P2P is disabled")


def test_bootstrap_interface_of_one_node(tmp_path: Path) -> None:
    nccl_run(tmp_path / "a", nccl_version="2.25.1", nodes=3)
    truth, lines, _ = nccl_run(tmp_path / "b", nccl_version="2.25.1", nodes=3, nccl_bootstrap_if={2: "docker0:172.17.0.2"})
    changes = changed_lines(tmp_path / "a", tmp_path / "b")
    assert changes and all("h20-node-03" in rel for rel in changes)
    for old, new in changes.values():
        assert sorted(re.sub(r"eth0(:10\.20\.1\.13)?$|eth0:10\.20\.1\.13", lambda m: "docker0:172.17.0.2" if m[0] != "eth0"
                             else "docker0", x) for x in old) == sorted(new)
    assert len(messages(lines, r"^Bootstrap: Using docker0:172\.17\.0\.2<0>$")) == 4
    assert len(messages(lines, r"^NET/IB : Using .*\[RO\]; OOB docker0:172\.17\.0\.2<0>$")) == 4
    net = {n["host"]: n for n in truth["nccl"]["net"]}
    assert (net["h20-node-03"]["bootstrap_if"], net["h20-node-03"]["bootstrap_addr"]) == ("docker0", "172.17.0.2")
    assert (net["h20-node-01"]["bootstrap_if"], net["h20-node-01"]["bootstrap_addr"]) == ("eth0", "10.20.1.11")


@pytest.mark.parametrize("version, via", [("2.11.4", "Channel 00 : 1[2a000] -> 0[18000] [send] via NET/AWS Libfabric/0/GDRDMA"),
                                          ("2.19.3", "Channel 00/1 : 1[1] -> 5[1] [send] via NET/AWS Libfabric/0/GDRDMA/Shared")])
def test_aws_ofi_plugin_name_has_a_space(tmp_path: Path, version: str, via: str) -> None:
    truth, lines, _ = nccl_run(tmp_path, nccl_version=version, nccl_fabric="ofi", nccl_connections="full")
    texts = [m["msg"] for m in lines]
    assert len(messages(lines, r"^Using network AWS Libfabric$")) == 8
    assert len(messages(lines, r"^NET/OFI Initializing aws-ofi-nccl ")) == 8 and not messages(lines, r"^NET/IB")
    assert len(messages(lines, r"^NET/Plugin: Loaded net plugin AWS Libfabric \(v\d+\)$")) == 8
    if "Channel 00/1" in via:
        assert via in texts
    else:
        assert any(re.fullmatch(r"Channel \d\d : \d\[[0-9a-f]+\] -> \d\[[0-9a-f]+\] \[send\] via NET/AWS Libfabric/[01]/GDRDMA", t)
                   for t in texts)
    assert {x["net"] for x in truth["nccl"]["connections"] if x["transport"] == "NET"} == {"AWS Libfabric"}


def test_pxn_and_intra_node_flavours(tmp_path: Path) -> None:
    truth, lines, _ = nccl_run(tmp_path / "pxn", nccl_version="2.24.3", nccl_pxn=True, nccl_connections="full")
    texts = [m["msg"] for m in lines]
    assert "Channel 00/0 : 3[3] -> 4[0] [send] via NET/IB/0(0)/GDRDMA" in texts
    assert "Channel 00/0 : 3[3] -> 4[0] [receive] via NET/IB/0/GDRDMA" in texts
    assert len(messages(lines, r"^Connected all rings, use ring PXN 1 GDR 1$")) == 8      # the world comm's ranks
    pxn = [x for x in truth["nccl"]["connections"] if x["pxn_via"] is not None]
    assert pxn and all(x["side"] == "send" and x["kind"] == "ring" for x in pxn)
    flavours = {"pcie": ("2.16.5", "P2P/IPC"), "direct": ("2.9.9", "P2P/direct pointer"),
                "shm": ("2.13.4", "SHM/direct/direct"), "indirect": ("2.19.3", "P2P/indirect/3[3]")}
    for intra, (version, via) in flavours.items():
        truth, lines, _ = nccl_run(tmp_path / intra, nccl_version=version, nccl_intra=intra, nccl_gdr=False)
        vias = {c["via"] for t in (m["msg"] for m in lines) for c in [CONN.match(t)] if c}
        assert via in vias, (intra, vias)
        assert all("/read" not in v for v in vias) or intra == "indirect"
        assert all(not v.endswith("/GDRDMA") for v in vias)
    assert messages(lines, r"^Channel 01/0 : 1\[1\] -> 2\[2\] via P2P/indirect/3\[3\]$")
    assert {x["detail"] for x in truth["nccl"]["connections"]} >= {"indirect/3", "CUMEM/read"}
    _, lines, _ = nccl_run(tmp_path / "ipc", nccl_version="2.21.5", nccl_cumem=False)
    assert messages(lines, r"^NCCL_CUMEM_ENABLE set by environment to 0\.$")
    assert not messages(lines, r"CUMEM/read") and messages(lines, r"via P2P/IPC/read$")


@pytest.mark.parametrize("version, shown", [("2.16.5", False), ("2.17.1", True), ("2.20.5", True), ("2.27.7", True),
                                            ("2.30.7", True)])
def test_nvls_lines(tmp_path: Path, version: str, shown: bool) -> None:
    if not shown:
        with pytest.raises(ValueError, match="nccl_nvls"):
            nccl_run(tmp_path, nccl_version=version, nccl_nvls=True)
        return
    _, lines, _ = nccl_run(tmp_path, nccl_version=version, nccl_nvls=True)
    minor = minor_of(version)
    suffix = r" \(NVLS_NCHANNELS 16\)" if 27 <= minor <= 29 else ""
    nvls = messages(lines, rf"^NVLS multicast support is available on dev \d{suffix}$")
    # 2.17 and 2.20 only on single-node comms (the expert comms); later releases on the world comm too.
    assert len(nvls) == (8 if minor in (17, 20) else 16)
    assert len(messages(lines, r" 16 nvls channels, ")) == len(nvls)
    assert len(messages(lines, r"^NVLS tuning: nChannels \d+ chunkSize \d+ treeMaxChunkSize \d+$")) == (16 if minor >= 30 else 0)


# -- optional subsystems -----------------------------------------------------------------------------

@pytest.mark.parametrize("version", ["2.4.8", "2.5.6", "2.9.9", "2.17.1", "2.20.5", "2.23.4", "2.24.3"])
def test_graph_tuning_and_coll_subsystems(tmp_path: Path, version: str) -> None:
    minor = minor_of(version)
    truth, lines, _ = nccl_run(tmp_path, nccl_version=version, nccl_subsys="INIT,ENV,GRAPH,TUNING,COLL",
                               nccl_connections="full")
    # GRAPH: Ring %02d : %d -> %d -> %d (2.10+), Tree %d : ... (2.8+), Pattern ... (2.5+, bw from 2.18)
    ring_lines = messages(lines, r"^Ring \d\d : -?\d+ -> \d+ -> -?\d+$")
    assert len(ring_lines) == (16 * 8 if minor >= 10 else 0)
    rings = {(r["comm"], r["channel"]): r["order"] for r in truth["nccl"]["rings"]}
    for m in lines:
        g = re.match(r"^Ring (\d\d) : (\d+) -> (\d+) -> (\d+)$", m["msg"])
        if g:
            ch, prev, me, nxt = (int(x) for x in g.groups())
            assert any(o[(o.index(me) - 1)] == prev and o[(o.index(me) + 1) % len(o)] == nxt
                       for (key, c), o in rings.items() if c == ch and me < len(o))
    assert len(messages(lines, r"^Tree \d : -?\d+ -> \d+ -> -?\d+/-?\d+/-?\d+$")) == (16 * 8 if minor >= 8 else 0)
    speed = "bw" if minor >= 18 else "speed"
    pattern = rf"^Pattern [14], crossNic 0, nChannels 8, {speed} \d+\.\d{{6}}/\d+\.\d{{6}}, type [A-Z]+/[A-Z]+, sameChannels [01]$"
    assert len(messages(lines, pattern)) == (32 if minor >= 5 else 0)
    assert len(messages(lines, r"^ [0-7] :(?: NET/\d+)?(?: GPU/\d+)+(?: NET/\d+)?$")) == (32 * 8 if minor >= 5 else 0)
    # TUNING: the table (rank 0 of each comm) in the release's shape.
    if minor == 4:
        head, rows, per_table = r"^Latency/AlgBw", r"^ *\w+ \|(?: *\d+\.\d/ *\d+\.\d *\|)+$", 0
    elif minor == 5:
        head, rows = r"^Latency/AlgBw \|(?: (?:Tree|Ring)/ {0,4}(?:LL|LL128|Simple) \|){6}$", r"^ *\w+ \|(?: *\d+\.\d/ *\d+\.\d\|){6}$"
        per_table = 6
    elif minor <= 17:
        cells = 9 if minor <= 13 else 12 if minor <= 16 else 15
        head, rows = rf"^Latency/AlgBw \|(?: +\w+/ *\w+ \|){{{cells}}}$", rf"^ *\w+ \|(?: +\d+\.\d/ +\d+\.\d \|){{{cells}}}$"
        assert len(messages(lines, rf"^ Max NThreads \|(?: +\d+ \|){{{cells}}}$")) == 3
        per_table = 7
    else:
        head, rows = r"^  Algorithm   \|", r"^ *\w+ \|(?: +\d+\.\d/ +\d+\.\d \|){3,9}$"
        per_table = 16 if minor <= 22 else 24
        assert len(messages(lines, r"^  Protocol    \|(?: +(?:LL|LL128|Simple) \|){9}$")) == 3 * per_table // 8
    table = [m["msg"] for m in lines if re.match(head, m["msg"]) or re.match(rows, m["msg"])
             or m["msg"].startswith((" Max NThreads |", "  Protocol    |"))]
    assert len(table) == (0 if minor == 4 else 3 * per_table)
    tables = [t for t in truth["nccl"]["tuning"] if t["kind"] == "table"]
    assert len(tables) == (0 if minor == 4 else 3)
    # TUNING decisions (rank 0 of the world comm, INFO from 2.20) after each COLL line.
    decisions = (r"^\d+ Bytes -> Algo \d proto \d time \d+\.\d{6}$" if minor <= 22 else
                 r"^\w+: \d+ Bytes -> Algo \d proto \d time \d+\.\d{6}$" if minor == 23 else
                 r"^\w+: \d+ Bytes -> Algo [A-Z_]+ proto [A-Z0-9]+ channel\{Lo\.\.Hi\}=\{0\.\.\d\}$")
    assert len(messages(lines, decisions)) == (3 if minor >= 20 else 0)
    assert len([t for t in truth["nccl"]["tuning"] if t["kind"] == "decision"]) == (3 if minor >= 20 else 0)
    # COLL: three collectives per rank on the world comm.
    coll = (r"^(AllReduce|AllGather|ReduceScatter): opCount [0-9a-f]+ sendbuff 0x[0-9a-f]+ recvbuff 0x[0-9a-f]+ "
            r"count \d+ datatype \d+ op \d+ root \d+ comm 0x[0-9a-f]+ \[nranks=8\] stream 0x[0-9a-f]+$")
    assert len(messages(lines, coll)) == 8 * 3
    assert truth["nccl"]["lines"] == len(lines) + 1 - (1 if minor >= 22 else 0)


@pytest.mark.parametrize("version, subsys, env_lines, bootstrap", [
    ("2.17.1", "INIT", 8, 0),          # parameter echo is subsystem ALL before 2.18: shown whatever the mask
    ("2.21.5", "INIT", 0, 0),          # ENV from 2.18: hidden without it
    ("2.21.5", None, 8, 0),            # 2.16-2.22 default mask INIT,ENV
    ("2.23.4", None, 8, 8),            # 2.23+ default mask INIT,BOOTSTRAP,ENV: bootstrap timings too
    ("2.23.4", "^BOOTSTRAP", 8, 0),
])
def test_debug_subsys_mask(tmp_path: Path, version: str, subsys: str | None, env_lines: int, bootstrap: int) -> None:
    _, lines, _ = nccl_run(tmp_path, nccl_version=version, nccl_subsys=subsys)
    assert len(messages(lines, r"^NCCL_SOCKET_IFNAME set by environment to eth0$")) == env_lines
    timings = r"^Bootstrap timings total \d+\.\d{6} \(create \d+\.\d{6}, send \d+\.\d{6}, recv \d+\.\d{6}, ring \d+\.\d{6}, delay \d+\.\d{6}\)$"
    assert len(messages(lines, timings)) == bootstrap
    assert len(messages(lines, r"Init COMPLETE$")) == 16


@pytest.mark.parametrize("version, echoed, matrix", [("2.6.4", False, False), ("2.7.8", True, False), ("2.21.5", True, False),
                                                     ("2.24.3", True, True)])
def test_nccl_algo_proto_env(tmp_path: Path, version: str, echoed: bool, matrix: bool) -> None:
    env = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "^LL128", "NCCL_IB_TIMEOUT": "22"}
    truth, lines, _ = nccl_run(tmp_path, nccl_version=version, nccl_env=env, nccl_subsys="INIT,ENV,TUNING")
    assert len(messages(lines, r"^NCCL_ALGO set by environment to Ring$")) == (16 if echoed else 0)   # per comm init
    assert len(messages(lines, r"^NCCL_PROTO set by environment to \^LL128$")) == (16 if echoed else 0)
    assert len(messages(lines, r"^NCCL_IB_TIMEOUT set by environment to 22\.$")) == 8                # once per process
    assert len(messages(lines, r"^Enabled NCCL Func/Proto/Algo Matrix:$")) == (3 if matrix else 0)
    if matrix:
        text = next(tmp_path.rglob("*/attempt_0/0/stdout.log")).read_text()
        block = text.split("Enabled NCCL Func/Proto/Algo Matrix:\n")[1].split("\n\n")[0].splitlines()
        assert re.fullmatch(r"     Function \|       LL     LL128    Simple   \|          Tree           Ring  .*", block[0])
        assert re.fullmatch(r"    AllReduce \|        1         0         1   \|             0              1 .*", block[5])
    enabled = next(t for t in truth["nccl"]["tuning"] if t["kind"] == "table")["enabled"]
    assert not any(cell.startswith("Tree/") or cell.endswith("/LL128") for cell in enabled["AllReduce"])


def test_warn_prefix_per_version(tmp_path: Path) -> None:
    expected = {"2.11.4": (None, None, r"NET/IB : Got completion with error 12, opcode 0, len 0, vendor err 129"),
                "2.26.2": (True, None, (r"NET/IB: Got completion from peer [\d.]+<\d+> with status=12 opcode=0 len=0 "
                                        r"vendor err 129 \(Send\) localGid ::ffff:[\d.]+ remoteGids::ffff:[\d.]+ hca mlx5_\d")),
                "2.30.7": (True, "ncclIbTest", r"NET/IB: Got completion from peer .*")}
    for version, (stamped, func, message) in expected.items():
        _, lines, _ = nccl_run(tmp_path / version, nccl_version=version, scenario="all-stuck")
        warns = [m for m in lines if m["level"] == "WARN"]
        assert len(warns) == 3, version
        for w in warns:
            assert bool(w["ts"]) == bool(stamped) and w["func"] == func and re.fullmatch(message, w["msg"])
            assert w["file"] == "transport/net_ib.cc"
    _, lines, _ = nccl_run(tmp_path / "socket", nccl_version="2.21.5", scenario="all-stuck", nccl_fabric="socket")
    assert len(messages(lines, r"^socketProgressOpt: Call to recv from [\d.]+<\d+> failed : Connection timed out$")) == 3


def test_nccl_cli_flags(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path), "--ranks", "8", "--gpus-per-node", "4", "--no-pyspy", "--nccl-version", "2.12.12",
                 "--nccl-fabric", "socket", "--nccl-shm-node", "1", "--nccl-bootstrap-if", "0=docker0:172.17.0.1",
                 "--nccl-env", "NCCL_ALGO=Tree,Ring", "--nccl-env", "NCCL_NET_GDR_LEVEL=PHB",
                 "--nccl-subsys", "INIT,ENV,GRAPH", "--nccl-connections", "full", "--nccl-intra", "pcie"]) == 0
    nccl = json.loads(capsys.readouterr().out)["nccl"]
    assert nccl["version"] == "2.12.12" and {n["network"] for n in nccl["net"]} == {"Socket"}
    assert {n["bootstrap_if"] for n in nccl["net"] if n["host"] == "h20-node-01"} == {"docker0"}
    assert {x["transport"] for x in nccl["connections"] if x["src_host"] == x["dst_host"] == "h20-node-02"} == {"SHM"}
    assert {x["detail"] for x in nccl["connections"] if x["transport"] == "P2P"} == {"IPC"}
    text = "".join(p.read_text() for p in tmp_path.rglob("stdout.log"))
    assert "NCCL INFO NCCL_ALGO set by environment to Tree,Ring\n" in text
    assert "NCCL INFO NCCL_NET_GDR_LEVEL set by environment to PHB\n" in text
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    for option in ("--nccl-fabric", "--nccl-gdr", "--nccl-pxn", "--nccl-intra", "--nccl-cumem", "--nccl-shm-node",
                   "--nccl-bootstrap-if", "--nccl-nvls", "--nccl-connections", "--nccl-subsys", "--nccl-env"):
        assert option in help_text


@pytest.mark.parametrize("kwargs, message", [
    (dict(nccl_fabric="infiniband"), "nccl_fabric"),
    (dict(nccl_pxn=True, nccl_version="2.11.4"), "nccl_pxn"),
    (dict(nccl_pxn=True, nccl_fabric="socket"), "nccl_pxn"),
    (dict(nccl_intra="indirect", nccl_version="2.7.8"), "indirect"),
    (dict(nccl_shm_node=2), "nccl_shm_node"),
    (dict(nccl_bootstrap_if={5: "docker0"}), "nccl_bootstrap_if"),
    (dict(nccl_subsys="INIT,GRAPHS"), "nccl_subsys"),
    (dict(nccl_env={"NCCL_IB_HCA": "mlx5_0"}), "nccl_env"),
    (dict(nccl_env={"IB_TIMEOUT": "22"}), "nccl_env"),
])
def test_bad_nccl_specs_are_refused(tmp_path: Path, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        generate_run(tmp_path, RunSpec(**dict(SMALL, **kwargs)))
