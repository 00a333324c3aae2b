"""Dates past the end of a file continue its calendar: the labels of rows past the last one equal
what pandas' ``date_range`` gives for the frequency ``pd.infer_freq`` finds (month starts and
ends, quarters, years, business days, weeks, days, hours), on many start dates including leap
years and February's month ends; rnnkit itself does not import pandas."""

from __future__ import annotations

import warnings
from pathlib import Path

import numpy as np
import pytest

from rnnkit.timeseries import continue_index, infer_frequency, read_csv, season_of

pd = pytest.importorskip("pandas")

#: the frequencies a user's series come in (pandas' aliases; the B* ones are business anchors)
DAILY_FREQS = ("ME", "MS", "2ME", "2MS", "QE", "QS", "QE-NOV", "QS-FEB", "4QE", "6MS", "YE", "YS",
               "YE-FEB", "YS-MAR", "2YE-FEB", "BME", "BMS", "BQE", "BQS", "BYE", "BYS", "B", "W-SUN",
               "W-WED", "2W-FRI", "D", "3D")
INTRADAY_FREQS = ("h", "6h", "15min", "s")
#: start dates every 37 days from 1999 to 2025: every month, weekday and leap year is met,
#: February's 28th and 29th among them
STARTS = pd.date_range("1999-11-30", "2025-03-05", freq="37D")


def pandas_freq(index: object) -> str | None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        f = pd.infer_freq(index)
    return None if f is None else str(getattr(f, "freqstr", f))


def expected_after(index: object, freq: str, count: int, unit: str) -> np.ndarray:
    rng = pd.date_range(index[-1], periods=count + 1, freq=freq)
    assert rng[0] == index[-1]
    return rng[1:].values.astype(f"datetime64[{unit}]")


@pytest.mark.parametrize("freq", DAILY_FREQS + INTRADAY_FREQS)
def test_continued_dates_equal_pandas_date_range_of_the_inferred_frequency(freq: str) -> None:
    unit = "s" if freq in INTRADAY_FREQS else "D"
    checked = 0
    for start in STARTS:
        for length in (3, 4, 13, 30):
            idx = pd.date_range(start, periods=length, freq=freq)
            inferred = pandas_freq(idx)
            assert inferred is not None, (freq, start, length)
            v = idx.values.astype(f"datetime64[{unit}]")
            got = continue_index(v, 9)
            assert np.array_equal(got, expected_after(idx, inferred, 9, unit)), (freq, start, length)
            found = infer_frequency(v)
            assert found is not None
            # the name rnnkit gives the frequency is one pandas reads, and it makes the same dates
            assert np.array_equal(got, expected_after(idx, found.name, 9, unit)), (found.name, inferred)
            checked += 1
    assert checked == 4 * len(STARTS)


def test_february_month_ends_and_leap_years() -> None:
    ends = np.array(["2023-11-30", "2023-12-31", "2024-01-31"], dtype="datetime64[D]")
    assert [str(d) for d in continue_index(ends, 3)] == ["2024-02-29", "2024-03-31", "2024-04-30"]
    feb = np.array(["2021-02-28", "2022-02-28", "2023-02-28"], dtype="datetime64[D]")
    assert [str(d) for d in continue_index(feb, 2)] == ["2024-02-29", "2025-02-28"]
    quarters = np.array(["2023-06-30", "2023-09-30", "2023-12-31"], dtype="datetime64[D]")
    assert [str(d) for d in continue_index(quarters, 2)] == ["2024-03-31", "2024-06-30"]


def test_a_time_of_day_is_kept_as_pandas_keeps_it() -> None:
    idx = pd.date_range("2024-01-31 10:30", periods=5, freq="ME")
    v = idx.values.astype("datetime64[s]")
    assert np.array_equal(continue_index(v, 4), expected_after(idx, pandas_freq(idx) or "", 4, "s"))


def test_an_irregular_index_has_no_frequency_and_continues_its_last_step() -> None:
    days = np.array(["2024-01-01", "2024-01-08", "2024-01-22", "2024-01-29"], dtype="datetime64[D]")
    assert pandas_freq(pd.DatetimeIndex(days)) is None and infer_frequency(days) is None
    assert [str(d) for d in continue_index(days, 2)] == ["2024-02-05", "2024-02-12"]
    years = np.array([1990, 1991, 1992])
    assert continue_index(years, 2).tolist() == [1993, 1994]
    months = np.array(["2024-01", "2024-02"], dtype="datetime64[M]")   # YYYY-MM periods
    assert [str(m) for m in continue_index(months, 2)] == ["2024-03", "2024-04"]


@pytest.mark.parametrize("freq", ["ME", "QE", "BME", "B", "YS"])
def test_a_csv_table_labels_rows_past_its_end_as_pandas_does(tmp_path: Path, freq: str) -> None:
    idx = pd.date_range("2019-10-31", periods=17, freq=freq)
    p = tmp_path / "s.csv"
    p.write_text("date,v\n" + "".join(f"{d:%Y-%m-%d},{k}\n" for k, d in enumerate(idx)))
    table = read_csv(p, ["v"])
    want = pd.date_range(idx[-1], periods=6, freq=pandas_freq(idx))
    assert table.labels(np.arange(15, 22)) == [f"{d:%Y-%m-%d}" for d in [*idx[15:], *want[1:]]]


def test_business_days_have_a_season_of_five_rows() -> None:
    idx = pd.date_range("2024-01-01", periods=60, freq="B").values.astype("datetime64[D]")
    assert season_of(idx, "date") == 5
    assert season_of(pd.date_range("2024-01-01", periods=60, freq="D").values.astype("datetime64[D]"),
                     "date") == 7
