"""An analysis and its report run with fewer cyclic-GC passes (``postmortem.analyzer.gc_passes``),
and leave the collector as they found it: after a return, an exception, nested calls, and
never lowering a threshold someone raised further."""

from __future__ import annotations

import gc

import pytest

from postmortem.analyzer import gc_passes, identity, pipeline
from postmortem.analyzer.gc_passes import YOUNG_THRESHOLD, fewer_passes
from tests.conftest import ROOT


@pytest.fixture
def default_threshold():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield
    gc.set_threshold(*saved)


def test_raised_while_running_and_put_back_after(default_threshold):
    seen = []

    @fewer_passes
    def inner():
        seen.append(gc.get_threshold())

    @fewer_passes
    def outer():
        seen.append(gc.get_threshold())
        inner()
        seen.append(gc.get_threshold())   # the nested call's return keeps the outer one's

    outer()
    assert seen == [(YOUNG_THRESHOLD, 10, 10)] * 3
    assert gc.get_threshold() == (700, 10, 10)


def test_put_back_after_an_exception(default_threshold):
    @fewer_passes
    def fails():
        raise ValueError("a parser bug")

    with pytest.raises(ValueError):
        fails()
    assert gc.get_threshold() == (700, 10, 10)
    assert gc_passes._depth == 0


def test_a_higher_threshold_is_never_lowered(default_threshold):
    gc.set_threshold(50_000, 20, 20)
    seen = []
    fewer_passes(lambda: seen.append(gc.get_threshold()))()
    assert seen == [(50_000, 20, 20)] and gc.get_threshold() == (50_000, 20, 20)


def test_the_analysis_runs_with_it(default_threshold, monkeypatch):
    seen = []
    real = identity.resolve

    def resolve(*args, **kwargs):
        seen.append(gc.get_threshold()[0])
        return real(*args, **kwargs)
    monkeypatch.setattr(identity, "resolve", resolve)
    run = pipeline.analyze([ROOT / "sample_logs" / "straggler"])
    run.con.close()
    assert seen == [YOUNG_THRESHOLD] and gc.get_threshold() == (700, 10, 10)
