"""The framework parsers route their lines first (issue 26): one multi-literal scan over their
``_ROUTE`` literals picks the lines some function of theirs reads (``lines.with_stream_where``),
and torch_errors follows tracebacks only in the streams that hold one
(``lines.with_stream_holding``). Routing is for speed alone: with every line handed to them,
as before, the store must be the same. A function that starts reading a literal missing from
its parser's ``_ROUTE`` fails here, on real output."""

from __future__ import annotations

import pytest

from postmortem.parsers import deepspeed, hf_trainer, megatron, titan_lightning, torch_errors, torchrun
from postmortem.parsers.lines import with_stream
from tests.conftest import REAL, ROOT
from tests.test_batched_parsing import _tables

ROUTED = (megatron, torchrun, hf_trainer, titan_lightning, deepspeed)


def _unrouted(monkeypatch) -> None:
    for module in ROUTED:
        monkeypatch.setattr(module, "with_stream_where", lambda lines, keep: with_stream(lines))
    monkeypatch.setattr(torch_errors, "with_stream_holding", lambda lines, mark: with_stream(lines))


@pytest.mark.parametrize("paths", [
    [REAL],
    [ROOT / "sample_logs" / "silent-deadlock-40r"],
    [ROOT / "tests" / "corpus"],
], ids=["real-data-logs", "silent-deadlock-40r", "corpus"])
def test_routing_changes_nothing(paths, monkeypatch):
    if not paths[0].exists():
        pytest.skip(f"{paths[0]} is not present")
    routed = _tables(paths)
    _unrouted(monkeypatch)
    assert _tables(paths) == routed
