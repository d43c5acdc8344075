"""Regenerate the generated pages of docs/ (tests/test_docs.py fails when one is stale).

    python -m bench.make_docs

* ``docs/schema.md``: the store's tables and columns, from the bundled deadlock sample.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def schema_page() -> str:
    from postmortem.analyzer.pipeline import analyze
    from postmortem.analyzer.store import schema_markdown
    from postmortem.rules.report import build_report

    run = analyze([ROOT / "sample_logs" / "silent-deadlock-40r"])
    try:
        build_report(run)  # adds the findings table
        return schema_markdown(run.con)
    finally:
        run.con.close()


PAGES = {"schema.md": schema_page}


def main() -> None:
    for name, make in PAGES.items():
        path = ROOT / "docs" / name
        text = make()
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote docs/{name}")


if __name__ == "__main__":
    main()
