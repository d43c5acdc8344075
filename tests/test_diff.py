"""postmortem diff: a good run against a failed one names what changed, heaviest first."""
from __future__ import annotations

import json

import pytest

from postmortem.cli import main
from postmortem.diff import diff
from postmortem.analyzer.pipeline import analyze


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    from postmortem.generator import RunSpec, generate_run

    root = tmp_path_factory.mktemp("diff")
    specs = {"good": RunSpec(nodes=2, gpus_per_node=4, scenario="healthy", config_files=True),
             "good2": RunSpec(nodes=2, gpus_per_node=4, scenario="healthy", config_files=True, seed=5),
             "bad": RunSpec(nodes=2, gpus_per_node=4, scenario="all-stuck", config_files=True,
                            nccl_env={"NCCL_PROTO": "Simple"}, nccl_version="2.18.3", nccl_shm_node=1)}
    for name, spec in specs.items():
        generate_run(root / name, spec)
    return root


def test_the_must_match_setting_comes_first_then_versions_and_transports(runs):
    result = diff(analyze([runs / "good"]), analyze([runs / "bad"]))
    changes = result["changes"]
    assert changes[0]["key"] == "NCCL_PROTO" and changes[0]["bad"].startswith("Simple on ")
    assert changes[0]["good"] == "<unset>" and "must-match" in changes[0]["note"]
    kinds = [c["kind"] for c in changes]
    assert kinds.index("version") < kinds.index("transport")
    nccl = next(c for c in changes if c["key"] == "NCCL")
    assert (nccl["good"], nccl["bad"]) == ("2.21.5", "2.18.3")
    assert any("SHM" in c["note"] for c in changes if c["kind"] == "transport")


def test_two_good_runs_of_the_same_job_do_not_differ(runs):
    # Different seeds: other pids, times, hosts' order of lines -- none of it is a change.
    result = diff(analyze([runs / "good"]), analyze([runs / "good2"]))
    assert result["changes"] == [], result["changes"]


def test_cli_exit_codes_json_and_stores(runs, tmp_path, capsys):
    assert main(["ingest", str(runs / "good"), "--db", str(tmp_path / "good.duckdb"), "--quiet"]) in (0, 1)
    capsys.readouterr()
    assert main(["diff", str(tmp_path / "good.duckdb"), str(runs / "bad"), "--format", "json", "--quiet"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "postmortem.diff/1" and out["changes"][0]["key"] == "NCCL_PROTO"
    assert main(["diff", str(tmp_path / "good.duckdb"), str(tmp_path / "good.duckdb"), "--quiet"]) == 0
    assert main(["diff", str(tmp_path / "missing.duckdb"), str(runs / "bad"), "--quiet"]) == 2


def test_the_healthy_and_env_mismatch_samples_differ_first_in_nccl_proto():
    from pathlib import Path

    samples = Path(__file__).resolve().parents[1] / "sample_logs"
    changes = diff(analyze([samples / "healthy-40r"]), analyze([samples / "env-mismatch"]))["changes"]
    first = changes[0]
    assert first["key"] == "NCCL_PROTO" and first["bad"].startswith("Simple on h20-node-02;")
    assert "NCCL INFO" in first["note"] and "env dump" in first["note"]  # both sources, one change
    assert [c["key"] for c in changes].count("NCCL_PROTO") == 1


# -- issue 24: the diff starts from the outcomes -------------------------------------------------

@pytest.fixture(scope="module")
def healthy_vs_deadlock():
    from pathlib import Path

    samples = Path(__file__).resolve().parents[1] / "sample_logs"
    return samples / "healthy-40r", samples / "silent-deadlock-40r"


def test_the_diff_leads_with_the_outcomes_and_says_when_no_change_explains_them(healthy_vs_deadlock, capsys):
    good, bad = healthy_vs_deadlock
    assert main(["diff", str(good), str(bad), "--quiet"]) == 1
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "Outcomes: they differ."
    assert "completed" in lines[1] and "healthy" in lines[1]
    bad_line = next(line for line in lines if line.startswith("  bad "))
    assert "hung" in bad_line and "culprit (hang)" in bad_line
    assert "Rank 17 never entered the collective #7219" in text
    # no setting explains a code-path hang: said plainly, and the log level is not "the likely cause"
    assert "No change that could explain it" in text
    assert text.index("No change that could explain it") < text.index("TORCH_CPP_LOG_LEVEL")
    assert "Other differences" in text.split("TORCH_CPP_LOG_LEVEL")[0]
    assert main(["diff", str(good), str(bad), "--quiet", "--format", "json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["outcomes"]["differ"] is True and out["explaining"] == []
    assert (out["outcomes"]["good"]["outcome"], out["outcomes"]["bad"]["outcome"]) == ("completed", "hung")
    assert out["outcomes"]["bad"]["culprit"]["ranks"] == [17]
    log_level = next(c for c in out["changes"] if c["key"] == "TORCH_CPP_LOG_LEVEL")
    assert log_level["could_explain"] is False


def test_a_setting_the_bad_verdict_names_is_first_and_marked():
    from pathlib import Path

    samples = Path(__file__).resolve().parents[1] / "sample_logs"
    good, bad = analyze([samples / "healthy-40r"]), analyze([samples / "env-mismatch"])
    from postmortem.rules.report import build_report

    result = diff(good, bad, build_report(good), build_report(bad))
    first = result["changes"][0]
    assert first["key"] == "NCCL_PROTO" and first["could_explain"] and first["named_by_verdict"]
    assert result["explaining"][0] == "NCCL_PROTO" and result["outcomes"]["differ"] is True
