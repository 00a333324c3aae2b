"""Time-series preparation for recurrent forecasters: CSV reading (dates, missing values),
windowing into (samples, window, features), scaling fitted on training rows, the forecast
settings saved with a model and the one place they are applied (:class:`Forecaster`), calendar
frequencies of dated rows, and the baselines a forecaster must beat: persistence,
least-squares AR(p), the training mean and the seasonal-naive forecast; rolling-origin
backtests ranking a forecaster among baselines by MASE, sMAPE, RMSE and MAE per horizon step
(:func:`backtest`; with statsmodels also exponential smoothing, ETS), and the choice of logs,
seasonal and first differences by stated rules (:func:`choose_preprocess`, the KPSS test:
:func:`choose_difference`);
panels of many series (long format), the likelihood heads and the data side of the
DeepAR-style probabilistic forecaster (``rnnkit.io.DeepAR`` holds its network)."""

from rnnkit.timeseries._backtest import (
    Backtest,
    Score,
    backtest,
    baselines,
    detect_season,
    mase,
    mase_scale,
    smape,
)
from rnnkit.timeseries._baselines import (
    ARModel,
    mae,
    mean_forecast,
    persistence_forecast,
    rmse,
    season_of,
    seasonal_naive_forecast,
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
from rnnkit.timeseries._dates import Frequency, continue_index, format_index, infer_frequency
from rnnkit.timeseries._deepar import DeepARSpec, Forecast
from rnnkit.timeseries._forecast import SPEC_KEY, Forecaster, ForecastSpec
from rnnkit.timeseries._likelihood import (
    Gaussian,
    Likelihood,
    NegativeBinomial,
    NegativeLogLikelihood,
    StudentT,
)
from rnnkit.timeseries._panel import Panel, Series, panel_from_frame, read_panel
from rnnkit.timeseries._preprocess import Choice, choose_difference, choose_preprocess, kpss, transform_rows
from rnnkit.timeseries._window import (
    TRANSFORMS,
    Scaler,
    WindowArrays,
    count_windows,
    make_windows,
)

__all__ = [
    "Backtest", "Score", "backtest", "baselines", "detect_season", "mase", "mase_scale", "smape",
    "Choice", "choose_difference", "choose_preprocess", "kpss", "transform_rows",
    "ARModel", "mae", "mean_forecast", "persistence_forecast", "rmse", "season_of",
    "seasonal_naive_forecast", "select_ar_order",
    "DATE_COLUMN_NAMES", "MISSING_POLICIES", "DataError", "Table", "read_csv", "read_header",
    "Frequency", "continue_index", "format_index", "infer_frequency",
    "SPEC_KEY", "ForecastSpec", "Forecaster",
    "TRANSFORMS", "Scaler", "WindowArrays", "count_windows", "make_windows",
    "DeepARSpec", "Forecast", "Gaussian", "Likelihood", "NegativeBinomial", "NegativeLogLikelihood",
    "StudentT", "Panel", "Series", "panel_from_frame", "read_panel",
]
