"""Time-series preparation for recurrent forecasters: CSV reading (dates, missing values),
windowing into (samples, window, features), scaling fitted on training rows, the forecast
settings saved with a model, and the persistence and least-squares AR(p) baselines."""

from rnnkit.timeseries._baselines import (
    ARModel,
    mae,
    persistence_forecast,
    rmse,
    select_ar_order,
)
from rnnkit.timeseries._csv import (
    DATE_COLUMN_NAMES,
    MISSING_POLICIES,
    DataError,
    Table,
    read_csv,
    read_header,
)
from rnnkit.timeseries._dates import format_index
from rnnkit.timeseries._window import (
    TRANSFORMS,
    ForecastSpec,
    Scaler,
    Windows,
    count_windows,
    make_windows,
)

__all__ = [
    "ARModel", "mae", "persistence_forecast", "rmse", "select_ar_order",
    "DATE_COLUMN_NAMES", "MISSING_POLICIES", "DataError", "Table", "format_index", "read_csv", "read_header",
    "TRANSFORMS", "ForecastSpec", "Scaler", "Windows", "count_windows", "make_windows",
]
