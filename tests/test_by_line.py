"""``postmortem.analyzer.pipeline.ByLine``: a lookup by (input_id, line_no) that must give what a left join
gives, in the frame's order, whatever the frame holds."""

from __future__ import annotations

import polars as pl
import pytest

from postmortem.analyzer.pipeline import ByLine

KEYS = {"input_id": pl.UInt32, "line_no": pl.UInt32}


def joined(frame: pl.DataFrame, rows: pl.DataFrame, columns: list[str], suffix: str = "") -> pl.DataFrame:
    right = rows.select("input_id", "line_no", *columns).rename(
        {c: f"{c}{suffix}" for c in columns if c in frame.columns})
    return frame.join(right, on=["input_id", "line_no"], how="left", maintain_order="left")


ROWS = pl.DataFrame({"input_id": [2, 0, 0, 1, 2], "line_no": [1, 5, 1, 3, 9], "rank": [20, 5, 1, 13, 29],
                     "node": ["b", "a", "a", None, "b"]}, schema={**KEYS, "rank": pl.Int64, "node": pl.String})
FRAME = pl.DataFrame({"input_id": [0, 2, 7, None, 1, 0, 2], "line_no": [1, 9, 1, 3, 3, 1, 2],
                      "rank": [-1] * 7, "text": list("abcdefg")}, schema={**KEYS, "rank": pl.Int64, "text": pl.String})


@pytest.mark.parametrize("rows", [ROWS, ROWS.sort("input_id", "line_no"), ROWS.clear(), ROWS.head(1)],
                         ids=["rows", "in-order", "none", "one"])
def test_a_lookup_gives_what_a_left_join_gives(rows):
    by_line = ByLine(rows)
    assert by_line.attach(FRAME, ["node"]).equals(joined(FRAME, rows, ["node"]))
    assert by_line.attach(FRAME, ["rank", "node"], suffix="_attr").equals(
        joined(FRAME, rows, ["rank", "node"], suffix="_attr"))
    assert by_line.attach(FRAME.clear(), ["node"]).equals(joined(FRAME.clear(), rows, ["node"]))


def test_a_line_of_two_rows_repeats_the_frames_row_as_a_join_does():
    twice = pl.concat([ROWS, ROWS.slice(2, 1).with_columns(rank=pl.lit(99, pl.Int64))])   # line (0, 1)
    got = ByLine(twice).attach(FRAME, ["rank"], suffix="_attr")
    assert got.height == FRAME.height + 2     # the frame has line (0, 1) twice
    assert got.sort(pl.all()).equals(joined(FRAME, twice, ["rank"], suffix="_attr").sort(pl.all()))


def test_a_frame_of_the_rows_own_lines_in_their_order_takes_their_columns_as_a_join_would():
    """The lines table: the same lines as the attribution, in the same order, so the columns are
    set beside it as they are; a frame of as many rows with other lines, or in another order,
    is looked up."""
    rows = ROWS.sort("input_id", "line_no")
    frame = rows.select("input_id", "line_no", rank=pl.lit(-1, pl.Int64), text=pl.lit("x"))
    by_line = ByLine(rows)
    assert by_line.attach(frame, ["rank", "node"], suffix="_attr").equals(
        joined(frame, rows, ["rank", "node"], suffix="_attr"))
    for other in (frame.reverse(), frame.with_columns(line_no=pl.col("line_no") + 1),
                  frame.with_columns(input_id=pl.lit(None, pl.UInt32))):
        assert by_line.attach(other, ["rank", "node"], suffix="_attr").equals(
            joined(other, rows, ["rank", "node"], suffix="_attr"))
    owned = rows.select("input_id", "line_no", rank=pl.lit(-1, pl.Int64))     # a column of that name already
    assert by_line.attach(owned, ["rank"]).equals(by_line.attached(owned.lazy(), ["rank"]).collect())
    assert by_line.attach(owned, ["rank"])["rank"].to_list() == rows["rank"].to_list()
    unkeyed = rows.with_columns(input_id=pl.when(pl.int_range(pl.len()) == 0).then(None).otherwise("input_id"))
    frame = unkeyed.select("input_id", "line_no", text=pl.lit("x"))    # a line without a key joins nothing
    assert ByLine(unkeyed).attach(frame, ["rank"]).equals(joined(frame, unkeyed, ["rank"]))
