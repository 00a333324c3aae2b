"""The small tables the CSV tests write with pandas' ``to_csv`` (and whose output is kept under
tests/data/pandas_csv/ for runs without pandas); each function builds one DataFrame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

FIXTURES = Path(__file__).resolve().parent / "data" / "pandas_csv"

#: Nile annual flow at Aswan, 1871-1970, 10^8 m^3 (public domain; the series of R's ``datasets::Nile``)
NILE = np.array([
    1120, 1160, 963, 1210, 1160, 1160, 813, 1230, 1370, 1140, 995, 935, 1110, 994, 1020, 960, 1180, 799,
    958, 1140, 1100, 1210, 1150, 1250, 1260, 1220, 1030, 1100, 774, 840, 874, 694, 940, 833, 701, 916,
    692, 1020, 1050, 969, 831, 726, 456, 824, 702, 1120, 1100, 832, 764, 821, 768, 845, 864, 862, 698,
    845, 744, 796, 1040, 759, 781, 865, 845, 944, 984, 897, 822, 1010, 771, 676, 649, 846, 812, 742, 801,
    1040, 860, 874, 848, 890, 744, 749, 838, 1050, 918, 986, 797, 923, 975, 815, 1020, 906, 901, 1170,
    912, 746, 919, 718, 714, 740], dtype=np.float64)


def frames(pd: Any) -> dict[str, tuple[Any, dict[str, Any]]]:
    """name -> (DataFrame, keyword arguments of ``to_csv``)."""
    years = np.arange(1871, 1971)
    q = pd.period_range("1959Q1", periods=8, freq="Q")
    return {
        # statsmodels' nile data set: the year is a float column, written 1871.0
        "nile_float_year.csv": (pd.DataFrame({"year": years.astype(float), "volume": NILE}),
                                {"index": False}),
        # a Series with an unnamed DatetimeIndex: ",volume" then 1871-01-01,...
        "nile_unnamed_dates.csv": (pd.DataFrame({"volume": NILE},
                                                index=pd.to_datetime([f"{y}-01-01" for y in years])), {}),
        # the default to_csv(): the unnamed RangeIndex 0, 1, 2, ... first
        "nile_range_index.csv": (pd.DataFrame({"year": years, "volume": NILE}), {}),
        # quarterly periods as the index (named), as macrodata's date is
        "quarters.csv": (pd.DataFrame({"infl": [0.0, 2.34, 2.74, 0.27, 2.31, 0.15, 1.39, 2.62]},
                                      index=q.rename("quarter")), {}),
        # macrodata's own columns: year and quarter as floats, neither a feature
        "macro_year_quarter.csv": (pd.DataFrame({"year": np.repeat([1959.0, 1960.0], 4),
                                                 "quarter": np.tile([1.0, 2.0, 3.0, 4.0], 2),
                                                 "infl": [0.0, 2.34, 2.74, 0.27, 2.31, 0.15, 1.39, 2.62]}),
                                   {"index": False}),
        # hourly timestamps, written "2020-01-01 00:00:00"
        "hourly.csv": (pd.DataFrame({"date": pd.date_range("2020-01-01", periods=6, freq="h"),
                                     "load": [3.0, 2.5, 2.0, 2.5, 4.0, 5.5]}), {"index": False}),
        # monthly periods, written "1959-01"
        "monthly.csv": (pd.DataFrame({"v": np.arange(6.0)},
                                     index=pd.period_range("1959-01", periods=6, freq="M").rename("month")),
                        {}),
        # two columns with one name
        "duplicate_names.csv": (pd.DataFrame([[1.0, 2.0], [3.0, 4.0]], columns=["a", "a"]), {"index": False}),
    }


def write(pd: Any, folder: Path) -> dict[str, Path]:
    """Every frame written by pandas into ``folder``; name -> path."""
    out = {}
    for name, (df, kwargs) in frames(pd).items():
        out[name] = folder / name
        df.to_csv(out[name], **kwargs)
    return out
