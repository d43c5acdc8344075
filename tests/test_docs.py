"""docs/ stays in step with the code: the store schema and the report's top-level contract."""
from pathlib import Path

from postmortem.analyzer.pipeline import analyze
from postmortem.rules.report import build_report
from postmortem.analyzer.store import schema_markdown

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "sample_logs" / "silent-deadlock-40r"


def test_schema_doc_is_current():
    run = analyze([SAMPLE])
    report = build_report(run)
    assert (ROOT / "docs" / "schema.md").read_text() == schema_markdown(run.con), \
        "regenerate with: python -m bench.make_docs"
    doc = (ROOT / "docs" / "report.md").read_text()
    for key in report:
        assert f"`{key}`" in doc, f"report key {key} is not documented in docs/report.md"
    for key in report["verdict"]:
        assert f"`verdict.{key}`" in doc
    for key in report["findings"][0]:
        assert f"`{key}`" in doc, f"finding field {key} is not documented"
