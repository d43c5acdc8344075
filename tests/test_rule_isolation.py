"""A rule that raises costs only its own findings: the report is still written in every format,
each format says which rule failed, with its exception, and that its findings are missing; the
verdict comes from the other rules, and the exit code is 3 (partial), whatever --fail-on says."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from postmortem import rules
from postmortem.cli import main
from tests.scenario import write_scenario

ROOT = Path(__file__).resolve().parents[1]
# A rule the scenario's verdict does not rest on (H001 names the culprit), with log-like markup
# in its message: the HTML and Markdown reports must escape it.
BROKEN = "P003"
MESSAGE = "boom <script>alert(1)</script>"


def _boom(ctx):
    raise RuntimeError(MESSAGE)


@pytest.fixture
def broken_rule(monkeypatch):
    monkeypatch.setattr(rules.BY_CODE[BROKEN], "check", _boom)


@pytest.fixture
def folder(tmp_path) -> Path:
    return write_scenario(tmp_path / "run", ranks=4, culprit=2)


def test_a_raising_rule_gives_a_complete_partial_report_in_every_format(broken_rule, folder, tmp_path, capsys):
    out = tmp_path / "pm"
    code = main(["report", str(folder), "--format", "text,md,json,html", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 3
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md", "report.txt"]
    report = json.loads((out / "report.json").read_text())
    errors = report["rule_errors"]
    assert errors and {e["rule"] for e in errors} == {BROKEN}
    assert errors[0]["exception"] == "RuntimeError" and errors[0]["message"] == MESSAGE
    assert "missing" in errors[0]["effect"] and errors[0]["where"].startswith("test_rule_isolation.py:")
    # the verdict and the findings of the other rules stand
    assert report["verdict"]["status"] == "culprit" and report["verdict"]["culprit"]["ranks"] == [2]
    assert "H001" in {f["code"] for f in report["findings"]}
    assert BROKEN not in {f["code"] for f in report["findings"]}
    _valid(report)
    text, md, page = ((out / n).read_text() for n in ("report.txt", "report.md", "report.html"))
    for rendered in (text, md, page):
        assert f"{BROKEN} checkpoint-stall raised RuntimeError" in rendered
        assert "its findings are missing" in rendered
        assert "rank 2" in rendered or "Culprit rank(s)" in rendered
    assert "PARTIAL REPORT" in text and "## Partial report" in md
    assert "<script>" not in page and "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    assert "<script>" not in md
    # stderr says it too: the rule's own line and the summary with the exit code
    assert f"rule {BROKEN} failed" in err and "the report is partial" in err and "Traceback" not in err


def test_partial_wins_over_findings_and_fail_on_never(broken_rule, folder, capsys):
    assert main(["report", str(folder), "--format", "json", "--quiet"]) == 3
    report = json.loads(capsys.readouterr().out)
    assert report["rule_errors"][0]["rule"] == BROKEN
    assert main(["report", str(folder), "--quiet", "--fail-on", "never"]) == 3
    text = capsys.readouterr().out
    assert "its findings are missing" in text.split("\n\n")[1]  # right under the verdict


def test_ingest_with_a_raising_rule_exits_3(broken_rule, folder, tmp_path, capsys):
    db = tmp_path / "run.duckdb"
    assert main(["ingest", str(folder), "--db", str(db), "--quiet"]) == 3
    assert db.exists() and "the report is partial" in capsys.readouterr().err


def test_without_a_failing_rule_the_codes_are_unchanged(folder, capsys):
    assert main(["report", str(folder), "--format", "json", "--quiet"]) == 1
    assert json.loads(capsys.readouterr().out)["rule_errors"] == []
    assert main(["report", str(folder), "--quiet", "--fail-on", "never"]) == 0
    assert "PARTIAL" not in capsys.readouterr().out


def _valid(report: dict) -> None:
    import jsonschema

    schema = json.loads((ROOT / "docs" / "report.schema.json").read_text())
    errors = [f"{e.json_path}: {e.message[:200]}" for e in jsonschema.Draft202012Validator(schema).iter_errors(report)]
    assert not errors, errors[:5]
