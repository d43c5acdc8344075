"""bench/parser_lines.py: every line parser timed on its own samples at two sizes."""
from __future__ import annotations

import json

from bench import parser_lines
from postmortem.parsers import ALL_PARSERS


def test_times_every_line_parser_at_each_size(tmp_path, capsys):
    out = tmp_path / "lines.json"
    assert parser_lines.main(["--lines", "300,100", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["sizes"] == [100, 300]
    assert {row["parser"] for row in result["parsers"]} == {m.__name__.rsplit(".", 1)[-1] for m in ALL_PARSERS}
    for row in result["parsers"]:
        assert [cell["lines"] >= size * 0.5 for cell, size in zip(row["sizes"], [100, 300])] == [True, True]
        assert row["growth"] > 0 and row["flagged"] == (row["growth"] > parser_lines.GROWS)
    printed = capsys.readouterr().out
    assert "us/line at 300" in printed and "scheduler" in printed


def test_a_list_of_parsers_times_those_alone(capsys):
    assert parser_lines.main(["--lines", "50", "--parsers", "scheduler,kernel"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed[1:]] == ["kernel", "scheduler"]
