"""Bundled data sets and the time-series preparation (CSV reading, windows, scaler, baselines).

Values are checked against the source files parsed independently here (the csv module), and
against hand-computed results on small series."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import datasets
from rnnkit.timeseries import (
    ARModel,
    DataError,
    ForecastSpec,
    Scaler,
    mae,
    make_windows,
    persistence_forecast,
    read_csv,
    rmse,
    select_ar_order,
)

SHARED = Path(__file__).resolve().parents[1] / "src" / "rnnkit" / "datasets" / "data"


def _raw(name: str) -> list[list[str]]:
    with open(datasets.path(name), newline="") as fh:
        return list(csv.reader(fh))


# -- bundled data --------------------------------------------------------------------------------
def test_sunspots_matches_the_file_row_for_row() -> None:
    s = datasets.sunspots()
    rows = _raw("sunspots")
    assert rows[0] == ["YEAR", "SUNACTIVITY"]
    assert len(s) == 309 == len(rows) - 1
    assert s.years.dtype == np.int64 and s.values.dtype == np.float64
    np.testing.assert_array_equal(s.years, np.arange(1700, 2009))
    np.testing.assert_array_equal(s.values, [float(r[1]) for r in rows[1:]])
    assert s.values[:4].tolist() == [5.0, 11.0, 16.0, 23.0]
    assert s.values[-3:].tolist() == [15.2, 7.5, 2.9]
    assert s.values.max() == 190.2 and s.years[s.values.argmax()] == 1957


def test_co2_keeps_its_59_missing_weeks_as_nan() -> None:
    c = datasets.co2()
    rows = _raw("co2")
    assert rows[0] == ["date", "co2"]
    assert len(c) == 2284 == len(rows) - 1
    assert c.dates.dtype == np.dtype("datetime64[D]")
    assert c.dates[0] == np.datetime64("1958-03-29") and c.dates[-1] == np.datetime64("2001-12-29")
    assert set(np.diff(c.dates).astype(int).tolist()) == {7}           # weekly, no gaps in dates
    empty = [k for k, r in enumerate(rows[1:]) if r[1] == ""]
    assert len(empty) == 59 and c.missing.sum() == 59
    np.testing.assert_array_equal(np.flatnonzero(c.missing), empty)
    assert c.dates[empty[0]] == np.datetime64("1958-05-10")
    present = ~c.missing
    np.testing.assert_array_equal(c.values[present], [float(r[1]) for r in rows[1:] if r[1] != ""])
    assert c.values[0] == 316.1 and c.values[-1] == 371.5


def test_bundled_files_are_the_shared_files_and_carry_source_notes() -> None:
    notes = (SHARED / "SOURCES.md").read_text()
    assert "public domain" in notes and "NOAA" in notes and "CDIAC" in notes
    for name, fname in (("sunspots", "sunspots.csv"), ("co2", "co2_weekly.csv")):
        assert datasets.path(name).name == fname
        shared = Path(__file__).resolve().parents[2] / "shared" / "data" / fname  # beside the clone
        if shared.exists():
            assert datasets.path(name).read_bytes() == shared.read_bytes()


def test_unknown_dataset_name_is_refused() -> None:
    with pytest.raises(rk.InvalidParameterError, match="unknown data set 'nile'.*sunspots, co2"):
        datasets.path("nile")


# -- CSV reading ---------------------------------------------------------------------------------
def _write(tmp_path: Path, text: str, name: str = "d.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_read_csv_parses_yyyymmdd_and_iso_dates(tmp_path: Path) -> None:
    a = read_csv(_write(tmp_path, "date,v\n20200105,1\n20200112,2.5\n"), ["v"])
    assert a.index_name == "date" and a.index.tolist() == [np.datetime64("2020-01-05"),
                                                           np.datetime64("2020-01-12")]
    b = read_csv(_write(tmp_path, "Timestamp,v\n2021-03-01T12:30:00,1\n2021-03-01T13:00:00,2\n"), ["v"])
    assert b.index_name == "Timestamp"
    assert (b.index[1] - b.index[0]) == np.timedelta64(1800, "s")
    c = read_csv(_write(tmp_path, "x,v\n1,2\n3,4\n"), ["x", "v"])      # no date column: row numbers
    assert c.index_name == "row" and c.index.tolist() == [0, 1]
    np.testing.assert_array_equal(c.matrix(["v", "x"]), [[2, 1], [4, 3]])
    assert c.lines.tolist() == [2, 3]


def test_read_csv_bad_input_names_the_problem(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="nope.csv: no such file"):
        read_csv(tmp_path / "nope.csv", ["v"])
    p = _write(tmp_path, "date,v,w\n20200101,1,a\n20200108,2,3\n")
    with pytest.raises(DataError, match="unknown column 'q'; the file has columns: date, v, w"):
        read_csv(p, ["q"])
    with pytest.raises(DataError, match="column 'w' is not numeric: line 2 has 'a'"):
        read_csv(p, ["w"])
    with pytest.raises(DataError, match="line 3: date column 'date' has '2020-13-45'"):
        read_csv(_write(tmp_path, "date,v\n2020-01-01,1\n2020-13-45,2\n", "bad.csv"), ["v"])
    with pytest.raises(DataError, match="line 3 has 3 fields, the header has 2"):
        read_csv(_write(tmp_path, "a,v\n1,2\n1,2,3\n", "ragged.csv"), ["v"])
    with pytest.raises(DataError, match=r"'date' must increase row by row: line 4 \(20200105\) does "
                                        r"not come after line 3 \(20200108\)"):
        read_csv(_write(tmp_path, "date,v\n20200101,1\n20200108,2\n20200105,3\n", "unsorted.csv"), ["v"])
    dup = _write(tmp_path, "year,v\n2000,1\n2000,2\n", "dup.csv")
    with pytest.raises(DataError, match="'year' must increase"):           # asked for: refused
        read_csv(dup, ["v"], date_col="year")
    found = read_csv(dup, ["v"])                                            # found by name: not used
    assert found.index_name == "row" and "repeats values" in found.notes[0]
    with pytest.raises(DataError, match="non-finite value 'inf' at line 2"):
        read_csv(_write(tmp_path, "v\ninf\n", "inf.csv"), ["v"])


def test_missing_values_error_drop_interpolate(tmp_path: Path) -> None:
    p = _write(tmp_path, "date,v\n20200101,1\n20200108,\n20200115,NA\n20200122,7\n20200129,9\n")
    with pytest.raises(DataError, match=r"column 'v' has 2 missing value\(s\) at lines "
                                        r"3 \(20200108\), 4 \(20200115\); choose --missing drop"):
        read_csv(p, ["v"])
    d = read_csv(p, ["v"], missing="drop")
    assert d.columns["v"].tolist() == [1.0, 7.0, 9.0] and d.lines.tolist() == [2, 5, 6]
    assert d.index.tolist() == [np.datetime64(x) for x in ("2020-01-01", "2020-01-22", "2020-01-29")]
    i = read_csv(p, ["v"], missing="interpolate")
    assert i.columns["v"].tolist() == [1.0, 3.0, 5.0, 7.0, 9.0]        # linear between 1 and 7
    k = read_csv(p, ["v"], missing="keep")
    assert np.isnan(k.columns["v"][1:3]).all()
    edge = _write(tmp_path, "v\n\n1\n2\n", "edge.csv")                  # a blank line is skipped
    assert read_csv(edge, ["v"]).columns["v"].tolist() == [1.0, 2.0]
    edge2 = _write(tmp_path, "v,w\n,1\n1,2\n", "edge2.csv")
    with pytest.raises(DataError, match=r"cannot interpolate .* start or end \(lines 2\)"):
        read_csv(edge2, ["v"], missing="interpolate")


def test_co2_file_needs_an_explicit_missing_policy() -> None:
    with pytest.raises(DataError, match=r"59 missing value\(s\) at lines 8 \(19580510\), 11 \(19580531\)"):
        read_csv(datasets.path("co2"), ["co2"])
    assert len(read_csv(datasets.path("co2"), ["co2"], missing="drop")) == 2284 - 59
    filled = read_csv(datasets.path("co2"), ["co2"], missing="interpolate").columns["co2"]
    raw = datasets.co2().values
    k = int(np.flatnonzero(np.isnan(raw))[0])                         # 1958-05-10, isolated gap
    assert np.isfinite(raw[k - 1]) and np.isfinite(raw[k + 1])
    assert filled[k] == pytest.approx((raw[k - 1] + raw[k + 1]) / 2)


# -- windows and scaling -------------------------------------------------------------------------
def test_make_windows_by_hand() -> None:
    f = np.arange(12, dtype=float).reshape(6, 2)          # rows [0,1], [2,3], ..., [10,11]
    t = np.array([10.0, 11, 12, 13, 14, 15])
    w = make_windows(f, t, window=3, horizon=2)
    assert w.x.shape == (2, 3, 2) and w.x.dtype == np.float32
    np.testing.assert_array_equal(w.x[0], [[0, 1], [2, 3], [4, 5]])
    np.testing.assert_array_equal(w.x[1], [[2, 3], [4, 5], [6, 7]])
    assert w.y[:, 0].tolist() == [14.0, 15.0] and w.pos.tolist() == [4, 5]
    fut = make_windows(f, None, window=3, horizon=2)       # every window, forecasts past the end
    assert len(fut) == 4 and fut.pos.tolist() == [4, 5, 6, 7]
    with pytest.raises(DataError, match="too few rows in the data: 6 row\\(s\\), but window 5 and "
                                        "horizon 2 need at least 7"):
        make_windows(f, t, window=5, horizon=2)


def test_scaler_fits_given_rows_and_inverts() -> None:
    v = np.array([[1.0, 4.0], [3.0, 4.0], [5.0, 4.0]])
    s = Scaler.fit(v[:2], ["a", "b"])
    assert s.mean.tolist() == [2.0, 4.0] and s.std.tolist() == [1.0, 1.0]   # constant column: std 1
    np.testing.assert_allclose(s.apply(v), [[-1, 0], [1, 0], [3, 0]])
    np.testing.assert_allclose(s.invert(s.apply(v)), v)
    q = Scaler.fit(np.array([[1.0], [9.0]]), ["c"], "sqrt")           # sqrt: 1, 3 -> mean 2, std 1
    assert q.mean.tolist() == [2.0] and q.std.tolist() == [1.0]
    np.testing.assert_allclose(q.apply(np.array([[16.0]])), [[2.0]])
    np.testing.assert_allclose(q.invert(np.array([[2.0], [-5.0]])), [[16.0], [0.0]])
    with pytest.raises(DataError, match="'sqrt' needs values >= 0; column 'c'"):
        q.apply(np.array([[-1.0]]))
    spec = ForecastSpec("c", ("c",), 4, 1, q, q, "YEAR", {"cell": "lstm"})
    back = ForecastSpec.from_json(spec.to_json())
    assert back.window == 4 and back.index_name == "YEAR" and back.extra == {"cell": "lstm"}
    np.testing.assert_array_equal(back.x_scaler.mean, q.mean)
    with pytest.raises(DataError, match="damaged"):
        ForecastSpec.from_json('{"format": "other"}')


def test_difference_spec_reads_changes_and_adds_them_back() -> None:
    ident = Scaler(("v",), np.array([0.0]), np.array([1.0]))
    twice = Scaler(("v",), np.array([1.0]), np.array([2.0]))          # z = (change - 1) / 2
    spec = ForecastSpec("v", ("v",), 2, 1, ident, twice, difference=True)
    assert ForecastSpec.from_json(spec.to_json()).difference is True
    v = np.array([[1.0], [4.0], [6.0], [7.0]])
    np.testing.assert_array_equal(spec.prepare(v), [[3.0], [2.0], [1.0]])
    w = spec.input_windows(v)                         # windows of 2 changes = 3 data rows each
    np.testing.assert_array_equal(w.x[:, :, 0], [[3, 2], [2, 1]])
    assert w.pos.tolist() == [3, 4]                   # the row after each window's last data row
    got = spec.to_levels(np.array([[0.5], [-1.0]]), v[:, 0], w.pos)
    np.testing.assert_allclose(got, [6.0 + (0.5 * 2 + 1), 7.0 + (-1.0 * 2 + 1)])
    with pytest.raises(DataError, match="must hold the 'v' column"):
        spec.to_levels(np.array([0.0]), None, np.array([3]))
    with pytest.raises(DataError, match="2 row\\(s\\), but window 2 needs at least 3"):
        spec.input_windows(v[:2])


# -- baselines -----------------------------------------------------------------------------------
def test_persistence_and_metrics_by_hand() -> None:
    t = np.array([1.0, 2.0, 4.0, 8.0])
    assert persistence_forecast(t, np.array([2, 3]), 1).tolist() == [2.0, 4.0]
    assert persistence_forecast(t, np.array([3]), 2).tolist() == [2.0]
    assert rmse(np.array([1.0, 3.0]), np.array([0.0, 0.0])) == pytest.approx(np.sqrt(5.0))
    assert mae(np.array([1.0, -3.0]), np.array([0.0, 0.0])) == 2.0


def test_ar_recovers_an_exact_recurrence_and_selects_its_order() -> None:
    # y_t = 2 + 0.5 y_{t-1} - 0.3 y_{t-2}, no noise: least squares is exact
    y = np.zeros(40)
    y[:2] = [1.0, 3.0]
    for k in range(2, 40):
        y[k] = 2 + 0.5 * y[k - 1] - 0.3 * y[k - 2]
    m = ARModel.fit(y, np.arange(2, 30), 2)
    np.testing.assert_allclose(m.coef, [2.0, 0.5, -0.3], atol=1e-9)
    np.testing.assert_allclose(m.predict(y, np.arange(30, 40)), y[30:40], atol=1e-9)
    rng = np.random.default_rng(0)
    z = np.zeros(3000)
    for k in range(2, 3000):
        z[k] = 0.6 * z[k - 1] - 0.4 * z[k - 2] + rng.normal()
    assert select_ar_order(z, np.arange(2, 3000), 8) == 2


def test_sunspot_baselines_against_a_loop_written_here() -> None:
    y = datasets.sunspots().values
    test = np.arange(259, 309)                       # the last 50 years, 1959-2008
    p = 9
    rows = [[1.0] + [y[t - k] for k in range(1, p + 1)] for t in range(p, 259)]
    coef = np.linalg.lstsq(np.array(rows), y[p:259], rcond=None)[0]
    ours = [coef[0] + sum(coef[k] * y[t - k] for k in range(1, p + 1)) for t in test]
    m = ARModel.fit(y, np.arange(p, 259), p)
    np.testing.assert_allclose(m.predict(y, test), ours, rtol=1e-10)
    assert rmse(m.predict(y, test), y[test]) == pytest.approx(16.95, abs=0.01)
    assert rmse(persistence_forecast(y, test), y[test]) == pytest.approx(30.35, abs=0.01)
    assert mae(persistence_forecast(y, test), y[test]) == pytest.approx(23.602, abs=1e-9)


def test_plain_import_rnnkit_reaches_the_datasets() -> None:
    import subprocess
    import sys

    code = ("import rnnkit; s = rnnkit.datasets.sunspots(); "
            "print(len(s), rnnkit.timeseries.rmse([3.0], [0.0]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["309", "3.0"]
