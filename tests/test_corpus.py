"""The parsers and rules on the real failure-injection corpus (tests/corpus, see its README).

The corpus was captured from real torchrun jobs with injected faults; each case's CASE.json
says what was injected, and the assertions hold the analysis to it.
"""
from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

from analyzer.pipeline import analyze
from analyzer.report import build_report

CORPUS = Path(__file__).with_name("corpus")
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "CASE.json").exists())
RULE_FIXTURES = {
    "X001": {"fires": ["test_the_first_failure_rule_names_the_injected_rank"],
             "quiet": ["test_the_first_failure_rule_stays_quiet_in_hangs"]},
    "X002": {"fires": ["test_wrong_world_size_is_reported_as_a_failed_rendezvous"],
             "quiet": ["test_the_rendezvous_rule_stays_quiet_when_the_job_ran"]},
}


def _case(name: str) -> dict:
    return json.loads((CORPUS / name / "CASE.json").read_text())


def test_the_corpus_has_every_fault_kind():
    assert {_case(n)["case"] for n in CASES} == {"skip", "sleep", "kill", "raise", "world"}


@pytest.mark.parametrize("name", [n for n in CASES if _case(n)["hang"]])
def test_the_culprit_rule_names_the_injected_rank_in_hang_cases(name):
    case = _case(name)
    report = build_report(analyze([CORPUS / name]))
    assert report["verdict"]["status"] == "culprit", report["verdict"]
    h001 = [f for f in report["findings"] if f["code"] == "H001"]
    assert h001 and h001[0]["ranks"] == [case["culprit_rank"]]
    assert report["actions"]["culprit_ranks"] == str(case["culprit_rank"])


@pytest.mark.parametrize("name", ["kill", "raise"])
def test_the_first_failure_rule_names_the_injected_rank(name):
    case = _case(name)
    report = build_report(analyze([CORPUS / name]))
    x001 = [f for f in report["findings"] if f["code"] == "X001"]
    assert x001 and x001[0]["ranks"] == [case["culprit_rank"]]
    assert report["verdict"]["status"] == "culprit"
    expected = "SIGKILL" if name == "kill" else "injected failure"
    assert expected in x001[0]["message"]


@pytest.mark.parametrize("name", [n for n in CASES if _case(n)["hang"]])
def test_the_first_failure_rule_stays_quiet_in_hangs(name):
    report = build_report(analyze([CORPUS / name]))
    assert not [f for f in report["findings"] if f["code"] == "X001"]


@pytest.mark.parametrize("name", ["kill", "raise"])
def test_torchrun_names_the_injected_rank_as_root_cause(name):
    case = _case(name)
    run = analyze([CORPUS / name])
    root = run.frame("SELECT rank, exitcode FROM exits WHERE root_cause")
    assert root["rank"].to_list() == [case["culprit_rank"]]
    if name == "kill":
        assert root["exitcode"].to_list() == [-9]
    else:
        raised = run.frame("SELECT rank, message FROM events WHERE kind = 'exception' AND message LIKE '%injected failure%'")
        assert set(raised["rank"].drop_nulls()) == {case["culprit_rank"]}


def test_wrong_world_size_is_reported_as_a_failed_rendezvous():
    report = build_report(analyze([CORPUS / "world"]))
    x002 = [f for f in report["findings"] if f["code"] == "X002"]
    assert x002 and "RendezvousTimeoutError" in x002[0]["title"]
    assert report["verdict"]["status"] != "healthy"


@pytest.mark.parametrize("name", [n for n in CASES if n != "world"])
def test_the_rendezvous_rule_stays_quiet_when_the_job_ran(name):
    report = build_report(analyze([CORPUS / name]))
    assert not [f for f in report["findings"] if f["code"] == "X002"]


def test_wrong_world_size_shows_the_rendezvous_timeout():
    run = analyze([CORPUS / "world"])
    events = run.frame("SELECT kind, message FROM events")
    assert events.filter(pl.col("message").str.contains("RendezvousTimeoutError")).height >= 1


@pytest.mark.parametrize("name", [n for n in CASES if _case(n)["hang"]])
def test_faulthandler_dumps_alone_name_the_culprit(name, tmp_path):
    """Without the py-spy dumps, the step watchdog's faulthandler dumps (stderr, behind the
    torchrun rank prefix) are enough."""
    import shutil

    case = _case(name)
    shutil.copytree(CORPUS / name, tmp_path / name, ignore=shutil.ignore_patterns("pyspy"))
    report = build_report(analyze([tmp_path / name]))
    h001 = [f for f in report["findings"] if f["code"] == "H001"]
    assert h001 and h001[0]["ranks"] == [case["culprit_rank"]]
