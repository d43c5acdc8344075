"""Most line parsers run once over all inputs (postmortem.analyzer.ingest, parsers.BATCHED) instead of once
per file. For the parsers moved to that path for speed (c10d, torchrun, torch_errors, pyspy) it must
change nothing: every table of the store, row for row, equals what they give when each file
is parsed on its own. (The parsers written for the batch from the start, which declare a
``BATCH_LITERAL``, stay batched in both runs: some combine evidence across files by design.)"""

from __future__ import annotations

import hashlib

import pytest

from postmortem import parsers
from postmortem.analyzer import store
from postmortem.analyzer.pipeline import analyze
from tests.conftest import REAL, ROOT


def _tables(paths) -> dict[str, tuple[int, str]]:
    run = analyze(paths)
    out = {}
    for table in store.tables(run.con):
        # every row as text, columns by name (their order may differ), rows sorted
        row = " || '|' || ".join(f'coalesce("{c}"::VARCHAR, \'∅\')' for c in sorted(run.columns(table)))
        rows = [r[0] for r in run.con.execute(f'SELECT {row} FROM "{table}"').fetchall()]
        out[table] = (len(rows), hashlib.sha256("\n".join(sorted(rows)).encode()).hexdigest())
    return out


@pytest.mark.parametrize("paths", [
    [ROOT / "sample_logs" / "gpu-fell-off-bus"],
    [ROOT / "sample_logs" / "slow-ring"],
    [REAL],
], ids=["gpu-fell-off-bus", "slow-ring", "real-data-logs"])
def test_batched_parsing_equals_parsing_each_file_alone(paths, monkeypatch):
    if not paths[0].exists():
        pytest.skip(f"{paths[0]} is not present")
    moved = [m for m in parsers.BATCHED if not hasattr(m, "BATCH_LITERAL")]
    assert {m.NAME for m in moved} >= {"c10d", "torchrun", "torch_errors", "pyspy"}
    batched = _tables(paths)
    monkeypatch.setattr(parsers, "BATCHED", [m for m in parsers.BATCHED if m not in moved])
    alone = _tables(paths)
    assert batched.keys() == alone.keys()
    differ = {t: (batched[t], alone[t]) for t in batched if batched[t] != alone[t]}
    assert not differ, differ


@pytest.mark.parametrize("paths", [
    [ROOT / "sample_logs" / "gpu-fell-off-bus"],
    [ROOT / "sample_logs" / "host-oom-kill"],
    [REAL],
], ids=["gpu-fell-off-bus", "host-oom-kill", "real-data-logs"])
def test_file_gates_skip_only_parsers_that_would_find_nothing(paths, monkeypatch):
    """Per-file parsers skip inputs without a line their ``file_gate`` passes (and only the
    inputs with a KEY=VALUE line are asked whether they are env dumps): the store is the same
    as when every parser reads every input."""
    if not paths[0].exists():
        pytest.skip(f"{paths[0]} is not present")
    from postmortem.analyzer import ingest

    gated = [m.NAME for m in parsers.LOG_PARSERS if hasattr(m, "file_gate") and m not in parsers.BATCHED]
    assert {"kernel", "health", "scheduler", "hwtools", "nccl_ras", "config"} <= set(gated)
    with_gates = _tables(paths)
    monkeypatch.setattr(ingest, "USE_FILE_GATES", False)
    assert _tables(paths) == with_gates
