"""The verdict on the real failure-injection corpus (tests/corpus, see its README).

Every case is a real torchrun job run here with one injected fault; its ``truth.json`` says
what was injected. The report must state the outcome, and name the culprit ranks (and the
node, where two were used) -- or name nobody where nobody is to blame or the logs cannot
decide. A failed job is never healthy; a healthy job gets no error finding.
"""
from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report

CORPUS = Path(__file__).with_name("corpus")
CASES = sorted(p.name for p in CORPUS.iterdir() if (p / "truth.json").exists())
RULE_FIXTURES = {
    "X001": {"fires": ["test_the_verdict_holds_to_the_truth"], "quiet": ["test_the_verdict_holds_to_the_truth"]},
    "X002": {"fires": ["test_wrong_world_size_is_reported_as_a_failed_rendezvous"],
             "quiet": ["test_the_verdict_holds_to_the_truth"]},
    "X000": {"fires": ["test_a_failure_no_rule_explains_is_failed_cause_not_determined"],
             "quiet": ["test_the_verdict_holds_to_the_truth"]},
    "H009": {"fires": ["test_the_verdict_holds_to_the_truth"], "quiet": ["test_the_verdict_holds_to_the_truth"]},
}


def _truth(name: str) -> dict:
    return json.loads((CORPUS / name / "truth.json").read_text())


def _report(path: Path) -> dict:
    run = analyze([path])
    try:
        return build_report(run)
    finally:
        run.con.close()


def test_the_corpus_is_large_and_varied():
    truths = [_truth(n) for n in CASES]
    assert len(CASES) >= 20
    assert {t["outcome"] for t in truths} >= {"failed", "completed"}
    assert sum(bool(t["culprit_ranks"]) for t in truths) >= 10
    assert any(t["culprit_nodes"] for t in truths)  # two torchrun agents as two nodes


@pytest.mark.parametrize("name", CASES)
def test_the_verdict_holds_to_the_truth(name, shared_cache):
    truth = _truth(name)
    report = _report(CORPUS / name)
    verdict = report["verdict"]
    assert report["outcome"]["outcome"] == truth["outcome"], report["outcome"]
    if truth.get("final_attempt_outcome"):
        assert report["outcome"].get("recovered") == (truth["final_attempt_outcome"] == "recovered")
    errors = [f for f in report["findings"] if f["severity"] == "error"]
    if truth["outcome"] in ("failed", "hung"):
        assert verdict["status"] not in ("healthy", "degraded", "unknown") and errors
    if truth["culprit_ranks"] and truth.get("decidable", True):
        assert verdict["status"] == "culprit", verdict["sentence"]
        assert verdict["culprit"]["ranks"] == truth["culprit_ranks"], verdict["sentence"]
        if truth["culprit_nodes"]:
            assert verdict["culprit"]["nodes"] == truth["culprit_nodes"]
    elif truth["culprit_ranks"]:
        # The logs cannot decide: whoever is named must be the injected rank.
        assert set(verdict["culprit"]["ranks"]) <= set(truth["culprit_ranks"])
    else:
        assert verdict["status"] != "culprit" or not verdict["culprit"]["ranks"], verdict["sentence"]
    if truth["outcome"] == "completed" and not truth["culprit_ranks"] and not truth.get("final_attempt_outcome"):
        assert not errors and verdict["status"] in ("healthy", "degraded")


def test_wrong_world_size_is_reported_as_a_failed_rendezvous():
    report = _report(CORPUS / "world")
    x002 = [f for f in report["findings"] if f["code"] == "X002"]
    assert x002 and "RendezvousTimeoutError" in x002[0]["title"]
    assert report["verdict"]["status"] != "healthy"


@pytest.mark.parametrize("name", [n for n in CASES if _truth(n)["culprit_ranks"] and _truth(n)["outcome"] == "failed"])
def test_a_failure_no_rule_explains_is_failed_cause_not_determined(name, tmp_path, monkeypatch):
    """With every rule but X000 silenced, a failed case says "failed, cause not determined",
    with each rank's first failure and last lines, and exits as an error."""
    from postmortem import rules
    monkeypatch.setattr(rules, "RULES", [r for r in rules.RULES if r.RULE.code == "X000"])
    shutil.copytree(CORPUS / name, tmp_path / name)
    report = _report(tmp_path / name)
    assert report["verdict"]["status"] == "undetermined"
    assert report["verdict"]["sentence"].startswith("Failed, cause not determined")
    x000 = [f for f in report["findings"] if f["code"] == "X000"]
    assert x000 and x000[0]["severity"] == "error"
    tails = x000[0]["details"]["ranks"]
    assert tails and all(t["last_lines"] for t in tails)
    assert any(t["first_failure"] for t in tails)
    # ... and every human-readable format shows them, not only the JSON
    from postmortem.views.render import markdown_report, text_report

    first = next(t for t in tails if t["first_failure"])
    for page in (text_report(report), markdown_report(report)):
        assert re.search(rf"[Rr]ank {first['rank']}, first failure: ", page) and ", last lines" in page
