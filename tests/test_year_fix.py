"""glog prints no year: its times carry a placeholder year, replaced by the run's year
(``timeline.fix_years``). The replacement is a shift, and does what ``datetime.replace(year=)``
does to every placeholder time: the same month, day and time of day; a Feb 29 in a year without
one has no time; a time with a real year is left as it is."""
import calendar
import random
from datetime import datetime, timedelta

import polars as pl

from postmortem.analyzer.timeline import PLACEHOLDER_YEAR, fix_years


def _expected(value: datetime | None, year: int) -> datetime | None:
    if value is None or value.year != PLACEHOLDER_YEAR:
        return value
    if value.month == 2 and value.day == 29 and not calendar.isleap(year):
        return None
    return value.replace(year=year)


def test_placeholder_years_are_replaced_as_datetime_replace_does():
    rnd = random.Random(7)
    start = datetime(PLACEHOLDER_YEAR, 1, 1)
    values = [start + timedelta(microseconds=rnd.randrange(366 * 86_400 * 10**6)) for _ in range(3000)]
    values += [datetime(PLACEHOLDER_YEAR, 2, 28, 23, 59, 59, 999999), datetime(PLACEHOLDER_YEAR, 2, 29),
               datetime(PLACEHOLDER_YEAR, 2, 29, 23, 59, 59, 999999), datetime(PLACEHOLDER_YEAR, 3, 1),
               datetime(PLACEHOLDER_YEAR, 12, 31, 23, 59, 59, 999999), datetime(PLACEHOLDER_YEAR - 1, 12, 31),
               datetime(PLACEHOLDER_YEAR + 1, 1, 1), datetime(2024, 2, 29, 12), None]
    frame = pl.DataFrame({"ts": pl.Series(values, dtype=pl.Datetime("us")),
                          "time": pl.Series(values[::-1], dtype=pl.Datetime("us"))})
    for year in (1, 1900, 1999, PLACEHOLDER_YEAR, 2023, 2024, 2100, 2400, 9999):
        fixed = fix_years({"t": frame}, year)["t"]
        assert fixed["ts"].to_list() == [_expected(v, year) for v in values], year
        assert fixed["time"].to_list() == [_expected(v, year) for v in values[::-1]], year
