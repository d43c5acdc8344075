"""Per-file parsers that read a chunk's inputs at once (``parsers.AT_ONCE``: tool output, kernel
logs, GPU health, configuration): handed several inputs in one frame, each input's rows and lines
are what the parser gives that input alone. What one input says (the device a serial line
belongs to, a NIC legend, the flaps of a port, a CSV header) must never reach the next one."""

from __future__ import annotations

import polars as pl
import pytest

from postmortem import parsers
from postmortem.analyzer import ingest
from postmortem.parsers.lines import by_input, envelope_frame
from tests.conftest import REAL, ROOT
from tests.test_batched_parsing import _tables


def _rotations(lines: list[str]) -> list[bytes]:
    """The lines as they are, from their middle on, and again: the second input starts inside
    whatever the first ended in, the third repeats the first's devices."""
    half = len(lines) // 2
    return [("\n".join(order) + "\n").encode() for order in (lines, lines[half:] + lines[:half], lines)]


def _alone(module, data: bytes) -> parsers.base.ParseResult:
    frame = by_input(envelope_frame([data]), [0]).drop("_input", "input_id")
    return module.parse(frame)


def _rows(result, name: str) -> list[tuple]:
    frame = result.tables.get(name)
    return [] if frame is None or frame.is_empty() else frame.rows()


@pytest.mark.parametrize("module", parsers.AT_ONCE, ids=lambda m: m.NAME)
def test_each_input_gets_what_it_would_alone(module):
    datas = _rotations(module.SAMPLE_LINES)
    others = by_input(envelope_frame(datas), [10, 11, 12]).drop("_input")
    results = [ingest.FileResult(10 + i, None) for i in range(len(datas))]
    shares, claimed = ingest._parse_at_once(results, others, None, set())
    shares, claimed = shares[module.NAME], pl.concat([c.lazy() for c in claimed.claims]).filter(pl.col("parser") == module.NAME).collect()
    assert shares and claimed.height, "the samples gave nothing"
    for i, data in enumerate(datas):
        alone = _alone(module, data)
        share = shares.get(10 + i, parsers.base.ParseResult())
        for name in alone.tables.keys() | share.tables.keys():
            assert _rows(share, name) == _rows(alone, name), (module.NAME, i, name)
        lines = claimed.filter(pl.col("input_id") == 10 + i)["line_no"]
        assert sorted(lines.to_list()) == sorted(alone.consumed.to_list()), (module.NAME, i)


@pytest.mark.parametrize("paths", [
    [ROOT / "sample_logs" / "silent-deadlock-40r"],
    [ROOT / "sample_logs" / "ib-link-flap"],
    [REAL],
], ids=["silent-deadlock-40r", "ib-link-flap", "real-data-logs"])
def test_the_store_is_the_same_as_parsing_each_input_alone(paths, monkeypatch):
    if not paths[0].exists():
        pytest.skip(f"{paths[0]} is not present")
    at_once = _tables(paths)
    monkeypatch.setattr(parsers, "AT_ONCE", ())
    assert _tables(paths) == at_once


def test_a_parser_failing_at_once_is_run_one_input_at_a_time(monkeypatch):
    """A parser that raises on the inputs together costs nothing: it is run one input at a
    time instead, as if it had never been asked for all of them (where a failure costs only the
    input it fails on)."""
    from postmortem.parsers import kernel

    paths = [ROOT / "sample_logs" / "gpu-fell-off-bus"]
    real = kernel.parse

    def apart_only(lines: pl.DataFrame):
        if "input_id" in lines.columns:
            raise ValueError("not together")
        return real(lines)
    monkeypatch.setattr(kernel, "parse", apart_only)
    others = by_input(envelope_frame(_rotations(kernel.SAMPLE_LINES)), [0, 1, 2]).drop("_input")
    shares, _ = ingest._parse_at_once([ingest.FileResult(i, None) for i in range(3)], others, None, set())
    assert kernel.NAME not in shares
    fell_back = _tables(paths)
    monkeypatch.setattr(parsers, "AT_ONCE", ())
    assert _tables(paths) == fell_back
