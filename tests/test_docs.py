"""docs/ stays in step with the code: the store schema, the report's top-level contract and the
rules reference."""
from pathlib import Path

from bench.make_docs import examples_in, rules_page
from postmortem.rules.catalogue import entries

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


def test_rules_doc_is_current_and_every_rule_has_an_example():
    """Everything but the examples' evidence lines is recomputed (finding the examples runs every
    case: minutes); each rule must have an example that says where it comes from."""
    page = (ROOT / "docs" / "rules.md").read_text()
    examples = examples_in(page)
    assert list(examples) == [e.rule.code for e in entries()], "regenerate with: python -m bench.make_docs rules.md"
    for code, example in examples.items():
        assert example.startswith("**Example** (") and "```text\n" in example, f"{code} has no example"
        assert example.split("```text\n", 1)[1].strip("`\n"), f"{code}'s example has no evidence line"
    assert page == rules_page(examples), "regenerate with: python -m bench.make_docs rules.md"
