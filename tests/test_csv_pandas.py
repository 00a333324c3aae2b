"""CSV files as pandas' ``to_csv`` writes them: float years, unnamed index columns (dates or a
row count), quarters, months, timestamps, no date column at all, unused date-like columns and
repeated names. Each case runs on the kept fixtures (always) and on a file pandas writes in the
test (where pandas is installed), which must equal the fixture byte for byte."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pandas_frames import FIXTURES, NILE, write
from rnnkit.timeseries import DataError, read_csv, read_header

NAMES = sorted(p.name for p in FIXTURES.glob("*.csv"))


def test_fixtures_are_what_pandas_writes(tmp_path: Path) -> None:
    pd = pytest.importorskip("pandas")
    written = write(pd, tmp_path)
    assert sorted(written) == NAMES
    for name, path in written.items():
        assert path.read_bytes() == (FIXTURES / name).read_bytes(), name


@pytest.fixture(params=["fixture", "pandas"])
def folder(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    if request.param == "fixture":
        return FIXTURES
    pd = pytest.importorskip("pandas")
    write(pd, tmp_path)
    return tmp_path


def test_float_years_are_years(folder: Path) -> None:
    t = read_csv(folder / "nile_float_year.csv", ["volume"])
    assert t.index_name == "year" and t.index_kind == "int" and t.index.dtype == np.int64
    assert t.index.tolist() == list(range(1871, 1971))
    np.testing.assert_array_equal(t.columns["volume"], NILE)
    assert t.labels(np.array([0, 99, 100, 101])) == ["1871", "1970", "1971", "1972"]
    assert t.notes == ()


def test_an_unnamed_date_index_is_the_index(folder: Path) -> None:
    t = read_csv(folder / "nile_unnamed_dates.csv", ["volume"])
    assert read_header(folder / "nile_unnamed_dates.csv") == ("index", "volume")
    assert t.index_name == "index" and t.index_kind == "date"
    assert t.index[0] == np.datetime64("1871-01-01") and t.index[-1] == np.datetime64("1970-01-01")
    assert t.notes == ()


def test_an_unnamed_row_count_is_ignored_and_said(folder: Path) -> None:
    t = read_csv(folder / "nile_range_index.csv", ["volume"])
    assert t.index_name == "year" and t.index.tolist()[:2] == [1871, 1872]   # the year is used
    assert len(t.notes) == 1 and "unnamed first column (pandas' index) counts the rows" in t.notes[0]
    assert "it is not used" in t.notes[0]
    none = read_csv(folder / "nile_range_index.csv", ["volume"], date_col=False)
    assert none.index_name == "row" and none.index.tolist()[:3] == [0, 1, 2] and none.notes == ()
    asked = read_csv(folder / "nile_range_index.csv", ["year"], date_col="index")
    assert asked.index_name == "index" and asked.columns["year"][0] == 1871.0


def test_quarters_and_months(folder: Path) -> None:
    q = read_csv(folder / "quarters.csv", ["infl"])
    assert q.index_name == "quarter" and q.index_kind == "quarter"
    assert q.index[0] == np.datetime64("1959-01") and q.index[1] == np.datetime64("1959-04")
    assert q.labels(np.arange(7, 10)) == ["1960Q4", "1961Q1", "1961Q2"]          # continues past the end
    m = read_csv(folder / "monthly.csv", ["v"])
    assert m.index_kind == "month" and m.labels(np.array([0, 6])) == ["1959-01", "1959-07"]


def test_timestamps_with_a_space(folder: Path) -> None:
    t = read_csv(folder / "hourly.csv", ["load"])
    assert t.index_kind == "datetime"
    assert (t.index[1] - t.index[0]) == np.timedelta64(3600, "s")
    assert t.labels(np.array([6])) == ["2020-01-01T06:00:00"]


def test_a_date_like_column_that_is_not_used_does_not_refuse_the_file(folder: Path) -> None:
    t = read_csv(folder / "macro_year_quarter.csv", ["infl"])
    assert t.index_name == "row" and len(t) == 8
    assert "'year' repeats values (line 2 and line 3 both have 1959)" in t.notes[0]
    with pytest.raises(DataError, match="'year' must increase row by row: line 3 "):
        read_csv(folder / "macro_year_quarter.csv", ["infl"], date_col="year")
    both = read_csv(folder / "macro_year_quarter.csv", ["year", "infl"])         # year as a feature
    assert both.columns["year"].tolist()[:5] == [1959.0] * 4 + [1960.0]
    np.testing.assert_array_equal(read_csv(folder / "nile_float_year.csv", ["year", "volume"],
                                           date_col=False).columns["year"], np.arange(1871.0, 1971.0))


def test_repeated_column_names_are_refused(folder: Path) -> None:
    with pytest.raises(DataError, match=r"column name\(s\) used more than once in the header: a"):
        read_csv(folder / "duplicate_names.csv", ["a"])
    with pytest.raises(DataError, match="used more than once"):
        read_header(folder / "duplicate_names.csv")


def test_bad_values_in_a_named_date_column_say_how_to_go_on(tmp_path: Path) -> None:
    p = tmp_path / "d.csv"
    p.write_text("date,v\n2020-01-01,1\nlater,2\n")
    with pytest.raises(DataError, match=r"line 3: date column 'date' has 'later', expected YYYYMMDD.*"
                                        r"--date-col none"):
        read_csv(p, ["v"])
    assert read_csv(p, ["v"], date_col=False).columns["v"].tolist() == [1.0, 2.0]
    p.write_text(",v\na,1\nb,2\n")                    # an unnamed index of labels: not used, said
    t = read_csv(p, ["v"])
    assert t.index_name == "row" and "unnamed first column (pandas' index) has 'a'" in t.notes[0]


def test_blocks_are_joined_in_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import rnnkit.timeseries._csv as csv_mod

    monkeypatch.setattr(csv_mod, "BLOCK_ROWS", 7)
    p = tmp_path / "b.csv"
    rows = [f"{2000 + k},{k * 0.5},{'' if k == 11 else k}" for k in range(30)]
    p.write_text("year,a,b\n" + "\n".join(rows[:15]) + "\n\n" + "\n".join(rows[15:]) + "\n")
    t = read_csv(p, ["a", "b"], missing="drop")
    assert t.index.tolist() == [2000 + k for k in range(30) if k != 11]
    assert t.columns["a"].tolist() == [k * 0.5 for k in range(30) if k != 11]
    assert t.lines.tolist() == [k + 2 + (k >= 15) for k in range(30) if k != 11]  # the blank line counts
    with pytest.raises(DataError, match=r"column 'b' has 1 missing value\(s\) at lines 13 \(2011\)"):
        read_csv(p, ["b"])
