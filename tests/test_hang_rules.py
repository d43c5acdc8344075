"""H rules on hand-written runs: they fire on the culprit and stay quiet where they must."""
from analyzer.pipeline import analyze
from analyzer.report import build_report
from tests.scenario import write_scenario


def _report(folder):
    return build_report(analyze([folder]))


def _codes(report):
    return {f["code"] for f in report["findings"]}


def test_rank_that_never_entered_is_named(tmp_path):
    report = _report(write_scenario(tmp_path, ranks=6, culprit=3))
    v = report["verdict"]
    assert v["status"] == "culprit" and v["culprit"]["ranks"] == [3]
    assert v["culprit"]["gpus"][0]["node"] == "node-02" and v["culprit"]["gpus"][0]["bus_id"] == "0000:2a:00.0"
    h001 = next(f for f in report["findings"] if f["code"] == "H001")
    assert h001["details"]["seq"] == 10 and h001["details"]["op"] == "ALLREDUCE"
    assert any("nothing in flight" in r for r in h001["details"]["why_no_timeout"])
    h004 = next(f for f in report["findings"] if f["code"] == "H004")
    assert h004["caused_by"] == [h001["id"]] and h004["ranks"] == []  # symptoms are not blamed


def test_desync_blames_the_minority(tmp_path):
    report = _report(write_scenario(tmp_path, ranks=6, culprit=4, desync=True))
    assert report["verdict"]["culprit"]["ranks"] == [4]
    assert "H002" in _codes(report) and "H001" not in _codes(report)


def test_all_stuck_names_no_single_culprit(tmp_path):
    report = _report(write_scenario(tmp_path, ranks=6, all_stuck=True))
    assert report["verdict"]["status"] == "no-single-culprit"
    assert "H003" in _codes(report) and "H001" not in _codes(report)
    assert report["actions"]["culprit_ranks"] is None


def test_guessed_rank_mapping_is_inconclusive(tmp_path):
    # 2.1-era lines, no [rankN]:, no NCCL output: rank 2's file is silent and its global rank is a guess.
    report = _report(write_scenario(tmp_path, ranks=4, culprit=2, guessed=True))
    assert report["verdict"]["status"] == "inconclusive"
    assert "H001" not in _codes(report)


def test_healthy_run_has_no_hang_finding(tmp_path):
    folder = tmp_path / "ok"
    folder.mkdir()
    (folder / "train.log").write_text(
        "h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
        " [2026-07-24 09:00:00] iteration        1/      10 | consumed samples:           64 | "
        "elapsed time per iteration (ms): 1000.0 | lm loss: 2.000000E+00 |\n")
    report = _report(folder)
    assert report["verdict"]["status"] == "healthy" and not report["findings"]
