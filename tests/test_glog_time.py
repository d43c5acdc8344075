"""glog's ``MMDD HH:MM:SS.frac`` read as a time in the placeholder year 2000 (``glog_timestamp``):
held to Python's own reading of the same text, impossible dates and times as null."""

from __future__ import annotations

from datetime import datetime

import polars as pl

from postmortem.parsers.base import glog_timestamp

CASES = [("0724", "08:00:17", "289999870"), ("724", "08:00:17", None), ("0229", "23:59:59", "999999999"),
         ("1231", "23:59:59", "0000001"), ("0101", "00:00:00", "5"), ("0101", "00:00:00", "123456"),
         ("1301", "00:00:00", "1"), ("0230", "00:00:00", "5"), ("0431", "12:00:00", "0"), ("0000", "00:00:00", "0"),
         ("0101", "24:00:00", "0"), ("0101", "00:60:00", "0"), ("0101", "00:00:61", "0")]


def _python(mmdd: str, hms: str, frac: str | None) -> datetime | None:
    micro = (frac or "0")[:6].ljust(6, "0")
    try:
        return datetime.strptime(f"2000{mmdd.zfill(4)} {hms}.{micro}", "%Y%m%d %H:%M:%S.%f")
    except ValueError:
        return None


def test_glog_times_are_read_as_python_reads_them():
    frame = pl.DataFrame({"mmdd": [c[0] for c in CASES], "hms": [c[1] for c in CASES], "frac": [c[2] for c in CASES]},
                         schema={"mmdd": pl.String, "hms": pl.String, "frac": pl.String})
    got = frame.select(glog_timestamp(pl.col("mmdd"), pl.col("hms"), pl.col("frac")).alias("ts"))["ts"].to_list()
    assert got == [_python(*case) for case in CASES]
    assert got[0] == datetime(2000, 7, 24, 8, 0, 17, 289999) and got[6:] == [None] * 7
