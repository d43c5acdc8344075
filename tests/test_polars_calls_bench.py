"""bench/polars_calls.py: the hand-over probe and the count of a sample's Polars calls."""
from __future__ import annotations

import json

from bench import polars_calls


def test_counts_a_samples_calls_and_probes_the_hand_over(tmp_path, capsys):
    out = tmp_path / "calls.json"
    assert polars_calls.main(["--sample", "rendezvous-missing-node", "--top", "3", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["counted"] and result["calls"] > 50 and 0 < len(result["top"]) <= 3
    assert sum(row["calls"] for row in result["top"]) <= result["calls"]
    assert all(row["place"].count(":") == 1 and not row["place"].startswith("/") for row in result["top"])
    assert result["probe"]["filter_1_rows_us"] > 0 and result["probe"]["ratio"] > 0
    printed = capsys.readouterr().out
    assert "Polars calls" in printed and "filter, 200 rows" in printed
