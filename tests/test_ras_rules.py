"""NCCL RAS reports reach the verdict (issue 22, bullet 3): H010 (operation counts that differ),
N021 (processes RAS could not reach), N022 (errors, statuses, timeouts; a healthy report the
watchdog contradicts). Reports written by ``postmortem/generator/rungen/ras.py`` from a known state (text and
JSON, the client's own layout rules), with c10d lines beside them, and the real nccl#1730 report."""
from __future__ import annotations

from pathlib import Path

from postmortem.generator.rungen.ras import OPS, Comm, Job, Rank, json_report, text_report
from tests.scenario import report_of

RULE_FIXTURES = {
    "H010": {"fires": ["test_ranks_behind_the_majority_are_the_suspects", "test_minority_ahead_blames_nobody",
                       "test_json_counts_name_the_ranks_behind"],
             "quiet": ["test_healthy_report_is_quiet", "test_real_1730_ras_ok_but_watchdog_timeout"]},
    "N021": {"fires": ["test_missing_and_dead_processes_are_named_with_their_nodes",
                       "test_the_json_report_feeds_the_same_rules"],
             "quiet": ["test_healthy_report_is_quiet", "test_real_1730_ras_ok_but_watchdog_timeout"]},
    "N022": {"fires": ["test_missing_and_dead_processes_are_named_with_their_nodes",
                       "test_real_1730_ras_ok_but_watchdog_timeout"],
             "quiet": ["test_healthy_report_is_quiet", "test_ranks_behind_the_majority_are_the_suspects"]},
}

TIMEOUT = ("[rank0]:[E0724 09:12:11.5 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective operation "
           "timeout: WorkNCCL(SeqNum=640, OpType=ALLGATHER, NumelIn=1024, NumelOut=32768, Timeout(ms)=600000) ran "
           "for 600081 milliseconds before timing out.")


def _find(report: dict, code: str) -> list[dict]:
    return [f for f in report["findings"] if f["code"] == code]


def _ring(counts_of) -> Job:
    ranks = []
    for r in range(32):
        counts = {o: 3 for o in OPS}
        counts["AllGather"] = counts_of(r)
        ranks.append(Rank(r, f"10.7.0.{r // 8 + 1}", 40000 + r, r % 8, counts=counts))
    return Job([Comm(0xFA93DAEA854B060B, ranks)])


def _write(folder: Path, report: str, extra: list[str] = ()) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "ncclras.txt").write_text(report)
    if extra:
        (folder / "rank0.log").write_text("\n".join(extra) + "\n")
    return folder


def test_ranks_behind_the_majority_are_the_suspects(tmp_path):
    job = _ring(lambda r: 639 if r in (12, 13) else 640)
    report = report_of(_write(tmp_path, text_report(job), [TIMEOUT]))
    h010 = _find(report, "H010")
    assert len(h010) == 1
    f = h010[0]
    assert f["severity"] == "error" and f["culprit"] and f["ranks"] == [12, 13] and f["nodes"] == ["10.7.0.2"]
    assert f["details"]["side"] == "behind" and f["details"]["majority"]["op_count"] == 640
    assert "30 ranks have launched AllGather up to operation 640 and wait in it" in f["message"]
    assert "py-spy dump --pid 40012, 40013" in f["suggestion"]
    assert not _find(report, "N022")


def test_minority_ahead_blames_nobody(tmp_path):
    job = _ring(lambda r: 641 if r in (12, 27) else 640)
    report = report_of(_write(tmp_path, text_report(job)))
    f = _find(report, "H010")[0]
    assert not f["culprit"] and not f["ranks"] and f["severity"] == "warning"
    assert f["details"]["side"] == "ahead" and f["details"]["ahead_comm_ranks"] == [12, 27]
    assert "the majority is behind" in f["message"]
    assert report["verdict"]["culprit"]["ranks"] == []


def _trouble() -> Job:
    ranks = [Rank(r, f"10.8.0.{r // 4 + 1}", 50000 + r, r % 4, counts={"AllReduce": 100}) for r in range(16)]
    ranks[5].state = "missing"
    ranks[9].state = "dead"
    ranks[2].init_state = 6
    ranks[3].async_error = 1
    ranks[7].abort_flag = True
    return Job([Comm(0x00C0FFEE, ranks)], timeouts=2)


def test_missing_and_dead_processes_are_named_with_their_nodes(tmp_path):
    # NCCL's bootstrap line of the second node turns its address into a host name.
    extra = [TIMEOUT, "node-b:50004:50004 [0] NCCL INFO Bootstrap : Using eth0:10.8.0.2<0>"]
    report = report_of(_write(tmp_path, text_report(_trouble()), extra))
    n021 = _find(report, "N021")
    assert len(n021) == 1 and n021[0]["severity"] == "error"
    f = n021[0]
    assert f["nodes"] == ["10.8.0.3", "node-b"]
    assert "process 50005 on node-b (10.8.0.2)" in f["message"] and "50009" in f["message"] and "(dead)" in f["message"]
    assert f["details"]["comm_ranks"] == [5, 9]
    assert "collection timeout" in f["message"]
    n022 = {x["details"]["check"]: x for x in _find(report, "N022")}
    assert set(n022) == {"errors", "status", "timeouts"}
    assert "Unhandled CUDA error" in n022["errors"]["message"] and "Remote process error" in n022["errors"]["message"]
    assert "ABORT" in n022["status"]["message"]


def test_the_json_report_feeds_the_same_rules(tmp_path):
    report = report_of(_write(tmp_path, json_report(_trouble()), [TIMEOUT]))
    f = _find(report, "N021")
    assert f and f[0]["details"]["comm_ranks"] == [5, 9]
    assert {x["details"]["check"] for x in _find(report, "N022")} >= {"errors"}


def test_healthy_report_is_quiet(tmp_path):
    report = report_of(_write(tmp_path, text_report(_ring(lambda r: 640))))
    assert not {"H010", "N021", "N022"} & {f["code"] for f in report["findings"]}


def test_real_1730_ras_ok_but_watchdog_timeout(real_logs):
    report = report_of(next((real_logs / "nccl").glob("nccl-issue-1730-*")))
    n022 = _find(report, "N022")
    assert [f["details"]["check"] for f in n022] == ["ok_but_timeout"] and n022[0]["severity"] == "info"
    assert "no proof of health" in n022[0]["message"] and "SeqNum 2398459" in n022[0]["message"]
    assert not _find(report, "H010") and not _find(report, "N021")
    assert report["verdict"]["status"] != "healthy"


def test_json_counts_name_the_ranks_behind(tmp_path):
    # ncclras -f json (2.28.7+) gives raw counts per rank: the same conclusion as the text.
    job = _ring(lambda r: 639 if r in (12, 13) else 640)
    f = _find(report_of(_write(tmp_path, json_report(job), [TIMEOUT])), "H010")[0]
    assert f["culprit"] and f["ranks"] == [12, 13] and f["details"]["side"] == "behind"


def test_a_malformed_report_is_not_evidence(tmp_path):
    # NCCL 2.27.3 listed garbage missing ranks (nccl#1762): said, not believed.
    text = text_report(_ring(lambda r: 640)).replace(
        "Errors\n======\n", "Errors\n======\n\n#0-0 (fa93daea854b060b) INCOMPLETE\n"
        "  Missing communicator data from 255 ranks\n  The missing ranks: 4294967295,2147483647\n")
    f = _find(report_of(_write(tmp_path, text, [TIMEOUT])), "N021")
    assert f and not f[0]["culprit"] and "malformed" in f[0]["message"] and not f[0]["ranks"]
