"""Real data sets bundled with rnnkit (public domain; see ``data/SOURCES.md``).

``sunspots()``
    yearly mean sunspot number, 1700-2008 (309 years, no gaps): :class:`YearlySeries`.
``co2()``
    weekly CO2 at Mauna Loa in ppmv, 1958-03-29 to 2001-12-29 (2,284 weeks): :class:`DatedSeries`;
    the 59 weeks without a measurement are NaN, never filled.
``path(name)``
    the bundled CSV file itself (``"sunspots"`` or ``"co2"``), e.g. for ``rnnkit train``.

Each call reads the CSV afresh and returns new arrays.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit.timeseries import read_csv

_FILES = {"sunspots": "sunspots.csv", "co2": "co2_weekly.csv"}


@dataclass(frozen=True)
class YearlySeries:
    """A yearly series: ``years`` int64 (n,), ``values`` float64 (n,)."""

    name: str
    years: np.ndarray
    values: np.ndarray
    units: str
    source: str

    def __len__(self) -> int:
        return int(self.values.shape[0])


@dataclass(frozen=True)
class DatedSeries:
    """A dated series: ``dates`` datetime64[D] (n,), ``values`` float64 (n,), NaN = missing."""

    name: str
    dates: np.ndarray
    values: np.ndarray
    units: str
    source: str

    def __len__(self) -> int:
        return int(self.values.shape[0])

    @property
    def missing(self) -> np.ndarray:
        """Boolean mask of the rows without a value."""
        return np.isnan(self.values)


def path(name: str) -> Path:
    """The bundled CSV file of data set ``name`` (``"sunspots"`` or ``"co2"``)."""
    if name not in _FILES:
        raise InvalidParameterError(f"unknown data set {name!r}; bundled: {', '.join(_FILES)}")
    return Path(str(resources.files("rnnkit.datasets").joinpath("data").joinpath(_FILES[name])))


def sunspots() -> YearlySeries:
    """Yearly mean sunspot activity 1700-2008 (NOAA NGDC; columns ``YEAR``, ``SUNACTIVITY``)."""
    t = read_csv(path("sunspots"), ["SUNACTIVITY"], missing="error")
    return YearlySeries("sunspots", t.index.astype(np.int64), t.columns["SUNACTIVITY"],
                        "mean sunspot number", "NOAA National Geophysical Data Center")


def co2() -> DatedSeries:
    """Weekly Mauna Loa CO2 in ppmv, 1958-03-29..2001-12-29 (Keeling & Whorf, SIO / CDIAC).

    Columns ``date`` (YYYYMMDD) and ``co2``; 59 weeks are NaN (missing in the source)."""
    t = read_csv(path("co2"), ["co2"], missing="keep")
    return DatedSeries("co2", t.index.astype("datetime64[D]"), t.columns["co2"], "ppmv",
                       "C. D. Keeling and T. P. Whorf, SIO; CDIAC, Oak Ridge National Laboratory")


__all__ = ["DatedSeries", "YearlySeries", "co2", "path", "sunspots"]
