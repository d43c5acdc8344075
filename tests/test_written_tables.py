"""Issue 26: the report reads the frames the analysis wrote instead of querying the store for them
(``Run.keep_written``), and must see exactly what the store would have given: the same rows in the
same order, the same columns and dtypes, attempt by attempt."""

from __future__ import annotations

import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from postmortem.analyzer import budget, bulk, store
from postmortem.analyzer.pipeline import analyze
from postmortem.generator import RunSpec, generate_run
from postmortem.rules.base import Context
from tests.conftest import ROOT

CORPUS = ROOT / "tests" / "corpus"


def _assert_kept_as_stored(run) -> None:
    assert run.written, "no table kept"
    with run.schema_frozen():
        for name, frame in run.written.items():
            assert_frame_equal(frame, run.frame(f'SELECT * FROM "{name}"'), check_exact=True)
            for attempt in run.info.get("attempts") or [0]:
                kept = Context(run, attempt).table(name)
                written, run.written = run.written, {}
                try:
                    queried = Context(run, attempt).table(name)
                finally:
                    run.written = written
                assert_frame_equal(kept, queried, check_exact=True)


@pytest.mark.parametrize("path", [ROOT / "sample_logs" / "silent-deadlock-40r", CORPUS / "restart-fails"],
                         ids=["deadlock", "three-attempts"])
def test_a_kept_table_is_what_the_store_gives_back(path):
    run = analyze([path], use_cache=False)
    _assert_kept_as_stored(run)
    if path.name == "restart-fails":
        assert len(run.info["attempts"]) == 3
        events = run.written["events"]["attempt"]
        assert events.n_unique() > 2, "the attempts are not told apart in the test's own input"


def test_tables_shown_with_the_coll_bulk_are_read_from_the_store(tmp_path):
    out = tmp_path / "run"
    generate_run(out, RunSpec(nodes=1, gpus_per_node=4, culprit=2, iterations_before_hang=2,
                              nccl_subsys="INIT,ENV,COLL", coll_trace=True))
    run = analyze([out], use_cache=False)
    assert run.con.execute("SELECT count(*) FROM duckdb_views() WHERE view_name = 'collectives'").fetchone()[0]
    assert not set(bulk.OWN) & set(run.written)
    _assert_kept_as_stored(run)


def test_only_types_that_read_back_unchanged_are_kept():
    con = duckdb.connect()
    frames = {"plain": pl.DataFrame({"a": [1], "b": ["x"], "t": pl.Series([0], dtype=pl.Datetime("us"))}),
              "zoned": pl.DataFrame({"t": pl.Series([0], dtype=pl.Datetime("us", "UTC"))}),
              "category": pl.DataFrame({"c": pl.Series(["x"], dtype=pl.Categorical)})}
    for name, frame in frames.items():
        store.write_table(con, name, frame)
    assert set(store.read_back_unchanged(con, frames)) == {"plain"}


def test_the_kept_frames_stay_within_their_share_of_the_budget(monkeypatch):
    def kept_sizes(room: int) -> list[int]:
        monkeypatch.setattr(budget, "kept_tables_bytes", lambda: room)
        return sorted(f.estimated_size() for f in analyze([CORPUS / "restart-fails"], use_cache=False).written.values())

    sizes = [size for size in kept_sizes(1 << 30) if size]
    assert len(sizes) > 3
    assert not any(kept_sizes(0)), "only empty tables fit in no room"
    assert [size for size in kept_sizes(sum(sizes[:3])) if size] == sizes[:3]


def test_a_run_held_open_keeps_what_the_smaller_share_would_have_kept(monkeypatch):
    """``Run.keep_at_most`` (the terminal UI, after the report) leaves the frames that
    ``keep_written`` keeps in that room, and only those: the UI holds no more than before the
    report's share grew."""
    def kept(room: int):
        monkeypatch.setattr(budget, "kept_tables_bytes", lambda: room)
        return analyze([CORPUS / "restart-fails"], use_cache=False)

    run = kept(1 << 30)
    every = dict(run.written)
    sizes = sorted(frame.estimated_size() for frame in every.values())
    for room in (0, sum(sizes[:3]), sum(sizes[:3]) + 1, sum(sizes) - 1, sum(sizes)):
        run.written = dict(every)
        run.keep_at_most(room)
        assert sorted(run.written) == sorted(kept(room).written), room
        assert sum(frame.estimated_size() for frame in run.written.values()) <= room
