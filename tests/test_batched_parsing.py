"""Most line parsers run once over all inputs (postmortem.analyzer.ingest, parsers.BATCHED) instead of once
per file. For the parsers moved to that path for speed (c10d, torchrun, torch_errors, pyspy) it must
change nothing: every table of the store, row for row, equals what they give when each file
is parsed on its own. (The parsers written for the batch from the start, which declare a
``BATCH_LITERAL``, stay batched in both runs: some combine evidence across files by design.)"""

from __future__ import annotations

import hashlib

import polars as pl
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
    """Parsers skip inputs without a line their ``file_gate`` passes: a per-file parser is not
    run there, a batched one reads the batch without them (and only the inputs with a
    KEY=VALUE line are asked whether they are env dumps). The store is the same as when every
    parser reads every input."""
    if not paths[0].exists():
        pytest.skip(f"{paths[0]} is not present")
    from postmortem.analyzer import ingest

    gated = [m.NAME for m in parsers.LOG_PARSERS if hasattr(m, "file_gate")]
    assert {"kernel", "health", "scheduler", "hwtools", "nccl_ras", "config", "torchrun", "torch_errors",
            "pyspy"} <= set(gated)
    with_gates = _tables(paths)
    monkeypatch.setattr(ingest, "USE_FILE_GATES", False)
    assert _tables(paths) == with_gates


def _text_inputs() -> list[tuple[str, bytes]]:
    """Every real excerpt, and every text file of the samples and the corpus, with cuts: of each,
    its first two lines (a py-spy dump's header alone); of each real one, its first third and
    its last third (a dump or a table cut short, a block whose header was lost)."""
    from tests.fuzz_corpus import real_files

    real = [item for item in real_files() if not item[0].endswith((".json", ".md"))]
    ours = [(str(p.relative_to(ROOT)), p.read_bytes()) for folder in ("sample_logs", "tests/corpus")
            for p in sorted((ROOT / folder).rglob("*")) if p.is_file() and p.suffix not in (".json", ".md", ".gz",
                                                                                         ".sqlite", ".nsys-rep")]
    cuts = [(f"{name} two lines", b"\n".join(data.split(b"\n")[:2])) for name, data in real + ours]
    cuts += [(f"{name} head", data[:len(data) // 3]) for name, data in real]
    cuts += [(f"{name} tail", data[-len(data) // 3:]) for name, data in real]
    return real + ours + cuts


def test_a_batched_parsers_gate_passes_every_input_it_reads_anything_from():
    """A batched parser with a ``file_gate`` reads only the inputs the gate passes
    (``postmortem.analyzer.ingest._Numbered.only``). That loses nothing where every row it
    gives and every line it claims, read from a batch of all the inputs without the gate, lies
    in an input with a line the gate passes: over the real excerpts, the samples' and the
    corpus's text files, and cuts of the real ones."""
    from postmortem.parsers.ascii_text import reading
    from postmortem.parsers.lines import envelope_frame, split_inputs
    from tests.fuzz_corpus import batch_frame

    inputs = _text_inputs()
    assert len(inputs) > 300
    with reading(False):     # every input's lines enveloped in one call, as a chunk's (ingest._prepare)
        batch = batch_frame(split_inputs(envelope_frame([data for _, data in inputs]), len(inputs)))
    gated = [m for m in parsers.BATCHED if hasattr(m, "file_gate")]
    assert {m.NAME for m in gated} == {"torchrun", "torch_errors", "pyspy"}
    for module in gated:
        passed = set(batch.filter(module.file_gate(pl.col("text").fill_null("")))["input_id"].to_list())
        assert 0 < len(passed) < len(inputs), module.NAME     # the gate decides something here
        with reading(False):
            result = module.parse(batch)
        rows = [frame["line_no"] for frame in result.tables.values() if not frame.is_empty()]
        read = batch.filter(pl.col("line_no").is_in(pl.concat([result.consumed.cast(pl.UInt32), *[
            r.cast(pl.UInt32) for r in rows]]).implode()))["input_id"].unique().to_list()
        assert read, module.NAME
        outside = {inputs[i][0] for i in read if i not in passed}
        assert not outside, (module.NAME, sorted(outside)[:5])


def test_a_gated_batch_keeps_its_inputs_global_rows_and_their_gaps():
    """``_Numbered.only``: the lines of the inputs a gate passed, with their global rows as they
    were (the inputs left out leave a gap, so no two inputs' lines become neighbours) and the
    mapping back to (input, line) cut alike; nothing when no input passed; the whole batch,
    uncopied, when those inputs hold more than half of its lines."""
    from postmortem.analyzer.ingest import _Numbered

    lines = pl.DataFrame({"input_id": [3, 3, 5, 5, 5, 5, 5, 8, 8], "line_no": [1, 2, 1, 2, 3, 4, 5, 1, 2],
                          "text": list("abcdefghi")}, schema_overrides={"input_id": pl.UInt32, "line_no": pl.UInt32})
    numbered = _Numbered.of(lines)
    kept = numbered.only({3, 8})
    assert kept.frame["line_no"].to_list() == [1, 2, 8, 9] and kept.frame["text"].to_list() == list("abhi")
    assert kept.mapping.rows() == [(1, 3, 1), (2, 3, 2), (8, 8, 1), (9, 8, 2)]
    assert numbered.only(set()) is None and numbered.only({4}) is None
    assert numbered.only({5, 8}) is numbered        # 7 of the 9 lines: read them all, as before
