"""Communicators that did not form as expected (issue 22, bullet 6): N015 on hand-written NCCL
init lines in the shapes of docs/formats/nccl.md 3.5 (2.21 ``ncclCommInitRank comm ... commId ...``)."""
from __future__ import annotations

from pathlib import Path

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from tests.scenario import write_files

RULE_FIXTURES = {
    "N015": {"fires": ["test_two_8_rank_communicators_instead_of_one_16_rank_job",
                       "test_two_processes_with_one_rank", "test_a_rank_that_never_completes_init"],
             "quiet": ["test_subgroups_of_a_bigger_job_are_fine", "test_a_healthy_generated_run_forms_its_communicators"]},
}


def _init(host: str, pid: int, dev: int, rank: int, nranks: int, comm_id: str, complete: bool = True,
          comm: str | None = None) -> list[str]:
    head = f"{host}:{pid}:{pid + 50} [{dev}] NCCL INFO"
    comm = comm or f"0x7f{pid:06x}"
    body = f"ncclCommInitRank comm {comm} rank {rank} nranks {nranks} cudaDev {dev} nvmlDev {dev} busId {dev + 1}8000 " \
           f"commId {comm_id}"
    return [f"{head} {body} - Init START"] + ([f"{head} {body} - Init COMPLETE"] if complete else [])


def _n015(folder: Path) -> tuple[list[dict], dict]:
    run = analyze([folder])
    try:
        report = build_report(run)
    finally:
        run.con.close()
    return [f for f in report["findings"] if f["code"] == "N015"], report


def test_two_8_rank_communicators_instead_of_one_16_rank_job(tmp_path):
    # nccl-tests on 2 nodes x 8 GPUs where each node rendezvoused on its own: two commIds, nranks 8.
    files = {}
    for n, host in enumerate(("gpu-a", "gpu-b")):
        for d in range(8):
            files[f"{host}/rank{n * 8 + d}.log"] = ["NCCL version 2.21.5+cuda12.4"] * (d == 0) + \
                _init(host, 3000 + 100 * n + d, d, d, 8, f"0x{0xa11 + n:x}")
    found, _ = _n015(write_files(tmp_path, files))
    split = [f for f in found if f["details"]["check"] == "split_job"]
    assert len(split) == 1
    f = split[0]
    assert f["details"]["size"] == 8 and f["details"]["processes"] == 16 and len(f["details"]["comm_ids"]) == 2
    assert "16 processes formed 2 separate 8-rank communicators" in f["message"] and f["nodes"] == ["gpu-a", "gpu-b"]
    assert "MASTER_ADDR" in f["suggestion"]


def test_subgroups_of_a_bigger_job_are_fine(tmp_path):
    # TP groups of 4 per node plus the 8-rank world communicator: every process is in two.
    files = {}
    for n, host in enumerate(("gpu-a", "gpu-b")):
        for d in range(4):
            pid = 3000 + 100 * n + d
            files[f"{host}/rank{n * 4 + d}.log"] = (_init(host, pid, d, n * 4 + d, 8, "0xfeed", comm=f"0x7e{pid:06x}")
                                                    + _init(host, pid, d, d, 4, f"0x{0xb00 + n:x}"))
    found, _ = _n015(write_files(tmp_path, files))
    assert not found


def test_two_processes_with_one_rank(tmp_path):
    files = {f"h/rank{r}.log": _init("h", 4000 + r, r, r, 4, "0xdead") for r in range(4)}
    files["h/dup.log"] = _init("h", 4900, 3, 1, 4, "0xdead")     # a second process claims rank 1
    found, _ = _n015(write_files(tmp_path, files))
    dup = [f for f in found if f["details"]["check"] == "duplicate_rank"]
    assert len(dup) == 1 and dup[0]["severity"] == "error"
    assert dup[0]["details"]["duplicates"][0]["rank"] == 1 and dup[0]["details"]["duplicates"][0]["pids"] == [4001, 4900]


def test_a_rank_that_never_completes_init(tmp_path):
    files = {f"h/rank{r}.log": _init("h", 4000 + r, r, r, 4, "0xbeef", complete=r != 2) for r in range(4)}
    found, report = _n015(write_files(tmp_path, files))
    stuck = [f for f in found if f["details"]["check"] == "init_incomplete"]
    assert len(stuck) == 1 and stuck[0]["details"]["stuck"][0]["rank"] == 2
    assert stuck[0]["severity"] == "warning" and "a log cut before that line" in stuck[0]["message"]
    # With a watchdog timeout beside it the job hung: an error.
    files["h/rank0.log"] += ["[rank0]:[E0724 09:12:11.5 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
                             "operation timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                             "Timeout(ms)=600000) ran for 600081 milliseconds before timing out."]
    found, report = _n015(write_files(tmp_path / "hung", files))
    stuck = [f for f in found if f["details"]["check"] == "init_incomplete"]
    assert stuck[0]["severity"] == "error"


def test_a_healthy_generated_run_forms_its_communicators(tmp_path):
    from postmortem.generator import RunSpec, generate_run

    generate_run(tmp_path, RunSpec(nodes=2, gpus_per_node=4, scenario="healthy"))
    found, _ = _n015(tmp_path)
    assert not found
