"""Attribution by runs of lines read alike (``identity._runs``) gives every line what attributing
it on its own gives: the same attribution frame, row for row, the same ranks table and the same
world size, on the samples, the real torchrun jobs and the real excerpts."""
from pathlib import Path

import pytest

from postmortem.analyzer import identity
from postmortem.analyzer.discover import discover
from postmortem.analyzer.ingest import parse_all
from tests.conftest import ROOT

SAMPLES = sorted(p.name for p in (ROOT / "sample_logs").iterdir() if p.is_dir())
TORCH_RUNS = sorted(p.name for p in (ROOT / "tests" / "torch_runs").iterdir() if p.is_dir())


def _both_ways(path: Path, monkeypatch) -> tuple:
    items, _ = discover([path])
    parsed = parse_all(items, workers=1)
    monkeypatch.setattr(identity, "RUNS_FROM", 10**12)
    one_by_one = identity.resolve(parsed.lines, parsed.tables, parsed.inputs)
    monkeypatch.setattr(identity, "RUNS_FROM", 0)
    in_runs = identity.resolve(parsed.lines, parsed.tables, parsed.inputs)
    return one_by_one, in_runs


def _assert_same(one_by_one, in_runs) -> None:
    assert in_runs[0].equals(one_by_one[0])
    assert in_runs[1].equals(one_by_one[1])
    assert in_runs[2] == one_by_one[2]


@pytest.mark.parametrize("sample", SAMPLES)
def test_runs_attribute_a_sample_as_lines_one_by_one(sample, monkeypatch):
    _assert_same(*_both_ways(ROOT / "sample_logs" / sample, monkeypatch))


@pytest.mark.parametrize("run", TORCH_RUNS)
def test_runs_attribute_a_real_torchrun_job_as_lines_one_by_one(run, monkeypatch):
    _assert_same(*_both_ways(ROOT / "tests" / "torch_runs" / run, monkeypatch))


@pytest.mark.parametrize("group", ["nccl", "torch", "training"])
def test_runs_attribute_real_excerpts_as_lines_one_by_one(group, real_logs, monkeypatch):
    for path in sorted((real_logs / group).glob("*.log")):
        _assert_same(*_both_ways(path, monkeypatch))


def test_a_long_log_is_attributed_in_far_fewer_rows_than_lines(monkeypatch):
    """The 40-rank sample's c10d status lines and training log fall in runs: the collapse is
    taken (its lines are in input and line order), not skipped."""
    items, _ = discover([ROOT / "sample_logs" / "silent-deadlock-40r"])
    parsed = parse_all(items, workers=1)
    seen = []
    runs = identity._runs
    monkeypatch.setattr(identity, "_runs", lambda df, *a, **k: seen.append(runs(df, *a, **k)) or seen[-1])
    monkeypatch.setattr(identity, "RUNS_FROM", 0)
    identity.resolve(parsed.lines, parsed.tables, parsed.inputs)
    heads, line_runs = seen[0]
    assert line_runs is not None and line_runs.height == parsed.lines.height
    assert heads.height < parsed.lines.height / 3
    assert heads["_w"].sum() == parsed.lines.height   # every line counted once, by its run's row


def test_a_runs_row_is_its_first_line_and_weighs_the_lines_it_stands_for(monkeypatch):
    """A run's row is its first line's, with the sum of its lines' weights (a bulk row stands
    for the COLL lines after it); each line names its run."""
    import polars as pl

    monkeypatch.setattr(identity, "RUNS_FROM", 0)
    df = pl.DataFrame({"input_id": [0] * 6 + [1], "line_no": [1, 2, 3, 4, 5, 6, 1],
                       "rank_tag": [0, 0, None, None, 0, 0, 0], "_w": [1, 3, 1, 2, 5, 1, 4],
                       "text": ["a", "b", "c", "d", "e", "f", "g"]},
                      schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "rank_tag": pl.Int32, "_w": pl.UInt32,
                              "text": pl.String})
    heads, line_runs = identity._runs(df, {}, decided=pl.col("rank_tag").is_not_null())
    assert heads.columns == [*df.columns, "_run"] and heads.schema["_w"] == pl.UInt32
    assert heads.select("line_no", "text", "_w", "_run").rows() == [
        (1, "a", 4, 1), (3, "c", 3, 2), (5, "e", 6, 3), (1, "g", 4, 4)]
    assert line_runs["_run"].to_list() == [1, 1, 2, 2, 3, 3, 4]


def test_lines_out_of_order_are_attributed_one_by_one(monkeypatch):
    """Runs are consecutive lines; where the lines are not in input and line order, none is taken."""
    import polars as pl

    monkeypatch.setattr(identity, "RUNS_FROM", 0)

    df = pl.DataFrame({"input_id": [0, 0, 1], "line_no": [2, 1, 1], "_w": [1, 1, 1]},
                      schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "_w": pl.UInt32})
    same, line_runs = identity._runs(df, {}, decided=pl.lit(False))
    assert line_runs is None and same.equals(df)





def test_each_line_takes_its_runs_attribution_by_gather_or_by_join():
    """``_per_line`` gathers by run number where each run has one row, and joins otherwise (a
    row a step repeated): the same rows as a join either way."""
    import polars as pl

    line_runs = pl.DataFrame({"input_id": [0, 0, 0, 1], "line_no": [1, 2, 3, 1], "_run": [1, 1, 2, 3]},
                             schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "_run": pl.UInt32})
    keep = ["input_id", "line_no", "rank"]
    for runs, ranks in (([3, 1, 2], [30, 10, 20]), ([1, 2, 2, 3], [10, 20, 21, 30])):
        heads = pl.DataFrame({"input_id": [9] * len(runs), "line_no": [9] * len(runs), "_run": runs, "rank": ranks},
                             schema={"input_id": pl.UInt32, "line_no": pl.UInt32, "_run": pl.UInt32, "rank": pl.Int64})
        joined = line_runs.join(heads.drop("input_id", "line_no"), on="_run", how="left", maintain_order="left")
        assert identity._per_line(heads, line_runs, keep).equals(joined.select(keep))
