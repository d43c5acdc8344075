"""Docs and small command-line conventions (issue 24, item 8): `explain` as clean text that cites
only files in the repository; `query` tables with ellipses and NULL, CSV with JSON for nested
values; documentation files in a job folder are not evidence unless named; empty per-rank files
are counted once, quietly."""
from __future__ import annotations

import csv
import io
import json
import re
import shutil

import pytest

from postmortem.cli import main
from postmortem.analyzer.pipeline import analyze
from postmortem.rules import RULES
from tests.conftest import ROOT
from tests.scenario import write_scenario

# -- explain -------------------------------------------------------------------------------------

@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.RULE.code)
def test_explain_is_clean_text_with_the_title_once(rule, capsys):
    assert main(["explain", rule.RULE.code]) == 0
    out = capsys.readouterr().out
    first, *rest = out.splitlines()
    assert first.startswith(f"{rule.RULE.code} {rule.RULE.name} ({rule.RULE.severity}): ")
    assert out.count(f"{rule.RULE.code} {rule.RULE.name}") == 1, out[:300]        # the title once
    assert "``" not in out and not re.search(r"(?<!\*)\*\*(?!\*)", out) and not re.search(r"\S::\s*$", out, re.M)
    for name in re.findall(r"(?:\.\./)?(?:shared/)?(?:docs/)?formats/([a-z-]+\.md)", out):
        assert f"docs/formats/{name}" in out and (ROOT / "docs" / "formats" / name).is_file()
    assert "shared/" not in out


def test_code_cites_format_notes_that_are_in_the_repository():
    """Every citation of a format note in the code points at docs/formats/, and at a section the
    note has."""
    wrong, missing = [], []
    for path in sorted(p for d in ("analyzer", "parsers", "rules", "bench", "tui", "views", "postmortem") for p in (ROOT / d).rglob("*")
                       if p.suffix in (".py", ".toml", ".md")):
        text = path.read_text(encoding="utf-8")
        for m in re.finditer(r"(\S*?)formats/([a-z-]+)\.md", text):
            if not m.group(1).endswith("docs/") or "shared" in m.group(1):
                wrong.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
                continue
            note = ROOT / "docs" / "formats" / f"{m.group(2)}.md"
            if not note.is_file():
                missing.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
                continue
            section = re.match(r"``?\s*(?:\(?sections?\s+|§)?(\d+(?:\.\d+)*)", text[m.end():m.end() + 20])
            if section and not _has_section(note, section.group(1)):
                missing.append(f"{path.relative_to(ROOT)}: {m.group(0)} section {section.group(1)}")
    assert not wrong, wrong
    assert not missing, missing


def _has_section(note, number: str) -> bool:
    """Whether the note has section ``number``: a heading of that number, one above it, one below
    it, or a range heading (``3.3 - 3.4``) that spans it."""
    heads = set()
    for first, last in re.findall(r"^#+ (\d+(?:\.\d+)*)\.?(?: - (\d+(?:\.\d+)*))?", note.read_text(), re.M):
        heads.add(first)
        if last:
            stem, a, b = first.rpartition(".")[0], int(first.rpartition(".")[2]), int(last.rpartition(".")[2])
            heads |= {f"{stem}.{i}" if stem else str(i) for i in range(a, b + 1)}
    return any(h == number or number.startswith(h + ".") or h.startswith(number + ".") for h in heads)


# -- query -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = write_scenario(tmp_path_factory.mktemp("q") / "run", ranks=4, culprit=1)
    db = tmp_path_factory.mktemp("qdb") / "s.duckdb"
    assert main(["ingest", str(folder), "--db", str(db), "--quiet"]) in (0, 1)
    return db


SQL = ("SELECT 'x' AS short, repeat('abcdefghij', 10) AS long, NULL::VARCHAR AS nothing, [1, 2] AS list, "
       "{'a': 1, 'b': [2, 3]} AS struct")


def test_query_table_cuts_with_an_ellipsis_and_shows_null(store, capsys):
    assert main(["query", "--db", str(store), SQL]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert "None" not in row
    cells = re.split(r"\s{2,}", row.strip())
    assert cells[0] == "x"
    assert cells[1].endswith("\u2026") and len(cells[1]) == 60 and cells[1].startswith("abcdefghij")
    assert cells[2] == "NULL"
    assert cells[3] == "[1, 2]" and json.loads(cells[4]) == {"a": 1, "b": [2, 3]}


def test_query_csv_writes_json_for_nested_values_and_empty_for_null(store, capsys):
    assert main(["query", "--db", str(store), "--format", "csv", SQL]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out)))
    assert rows[0] == ["short", "long", "nothing", "list", "struct"]
    assert rows[1][2] == "" and json.loads(rows[1][3]) == [1, 2]
    assert json.loads(rows[1][4]) == {"a": 1, "b": [2, 3]}           # not {'a': 1, ...}


# -- documentation files are not evidence -----------------------------------------------------------

XID = "[ 8812.402823] NVRM: Xid (PCI:0000:2a:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"


def test_a_readme_in_a_job_folder_is_not_read_unless_named(tmp_path):
    folder = write_scenario(tmp_path / "run", ranks=4, culprit=1)
    (folder / "README.md").write_text("The node logged:\n\n" + XID)
    (folder / "notes.md").write_text(XID)
    (folder / "expected.json").write_text(json.dumps({"findings": [{"code": "H001"}]}))
    (folder / "truth.json").write_text("{}")
    (folder / "CASE.json").write_text("{}")
    run = analyze([folder], use_cache=False)
    paths = run.frame("SELECT path FROM inputs")["path"].to_list()
    assert not {"README.md", "notes.md", "expected.json", "truth.json", "CASE.json"} & set(paths)
    assert "xid" not in set(run.frame("SELECT kind FROM node_events")["kind"].to_list()) \
        if run.columns("node_events") else True
    named = analyze([folder / "README.md", folder], use_cache=False)      # named: read like any file
    assert "README.md" in named.frame("SELECT path FROM inputs")["path"].to_list()


def test_sample_readmes_are_not_evidence():
    run = analyze([ROOT / "sample_logs" / "gpu-fell-off-bus"])
    paths = run.frame("SELECT path FROM inputs")["path"].to_list()
    assert "README.md" not in paths and "expected.json" not in paths
    xids = run.frame("SELECT node FROM node_events WHERE kind = 'xid'")
    assert xids["node"].null_count() == 0          # no Xid row without a node (the README's prose)


def test_documentation_inside_an_archive_is_left_out_too(tmp_path):
    folder = write_scenario(tmp_path / "run", ranks=2, culprit=1)
    (folder / "README.md").write_text(XID)
    archive = shutil.make_archive(str(tmp_path / "job"), "gztar", folder)
    run = analyze([archive], use_cache=False)
    assert not any(p.endswith("README.md") for p in run.frame("SELECT path FROM inputs")["path"].to_list())


# -- empty per-rank files: counted once, quietly -------------------------------------------------------

def _torchrun_folder(tmp_path, empty: int):
    folder = write_scenario(tmp_path / "run", ranks=4, culprit=1)
    for r in range(empty):
        d = folder / "logs" / "node" / "4242_x" / "attempt_0" / str(r)
        d.mkdir(parents=True)
        (d / "stderr.log").write_bytes(b"")
    return folder


def test_empty_per_rank_files_are_counted_once_and_not_warned(tmp_path, capsys):
    folder = _torchrun_folder(tmp_path, 6)
    assert main(["report", str(folder), "--format", "text,json", "--out", str(tmp_path / "out"),
                 "--no-cache"]) in (0, 1)
    err = capsys.readouterr().err
    assert "empty file" not in err                                       # not warned on stderr
    text = (tmp_path / "out" / "report.txt").read_text()
    assert text.count("empty") == 1 and "(6 skipped, all of them empty)" in text   # counted once
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["inputs"]["totals"]["empty"] == 6
    assert not any("empty" in m for m in report["messages"])


def test_quiet_keeps_notes_about_unreadable_inputs_but_not_empty_files(tmp_path, capsys):
    folder = _torchrun_folder(tmp_path, 3)
    (folder / "core.bin").write_bytes(bytes(range(256)) * 64)            # a note about an input
    assert main(["report", str(folder), "--format", "json,text", "--out", str(tmp_path / "o"), "--quiet"]) in (0, 1)
    err = capsys.readouterr().err
    assert "core.bin: binary file" in err and "empty file" not in err and "wrote" not in err
