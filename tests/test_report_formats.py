"""report --format text,md,json,html --out DIR writes every format from one ingest, and the same
inputs give the same JSON (timings apart) and Markdown, byte for byte."""
from __future__ import annotations

import json

from postmortem.cli import main
from tests.scenario import write_scenario


def test_all_four_formats_from_one_command_are_deterministic(tmp_path, capsys):
    folder = write_scenario(tmp_path / "run", ranks=6, culprit=3)
    outputs = []
    for n in range(2):
        out = tmp_path / f"out{n}"
        assert main(["report", str(folder), "--format", "text,md,json,html", "--out", str(out), "--quiet"]) == 1
        assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "report.md", "report.txt"]
        outputs.append(out)
    first, second = (json.loads((o / "report.json").read_text()) for o in outputs)
    assert set(first["timings"]) and first.pop("timings") is not None and second.pop("timings") is not None
    assert first == second
    for name in ("report.md", "report.txt", "report.html"):
        assert (outputs[0] / name).read_bytes() == (outputs[1] / name).read_bytes(), name
    assert first["verdict"]["culprit"]["ranks"] == [3]


def test_unknown_format_is_a_usage_error(tmp_path, capsys):
    folder = write_scenario(tmp_path / "run", ranks=4, culprit=1)
    assert main(["report", str(folder), "--format", "pdf", "--quiet"]) == 2
    assert "unknown format" in capsys.readouterr().err
