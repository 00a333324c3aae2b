"""``DeepAR``: a global probabilistic forecaster over a panel of series (Salinas et al., 2020),
trained by maximising a likelihood, forecasting by ancestral sampling, saved as one
safetensors model file with its settings (no pickle).

The data side (inputs, windows, sampling, the forecast) is :mod:`rnnkit.timeseries._deepar`;
this module owns the network: ``layers`` stacked LSTM or GRU layers of ``units`` returning every
step, and a dense head of the likelihood's raw outputs, trained with
:class:`~rnnkit.timeseries._likelihood.NegativeLogLikelihood` and Adam. Forecasts run a
stateful copy of the network (the same weights) one step at a time.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit._errors import FileFormatError, InvalidParameterError
from rnnkit._numbers import check_float, check_int
from rnnkit.io._forecaster import read_metadata
from rnnkit.io._model import load_model, save_model
from rnnkit.layers import Dense
from rnnkit.models import EarlyStopping, Sequential
from rnnkit.optimizers import Adam
from rnnkit.recurrent import GRU, LSTM
from rnnkit.timeseries._dates import DataError
from rnnkit.timeseries._deepar import (
    DEEPAR_KEY,
    DeepARSpec,
    Forecast,
    calibration_rows,
    calibration_step,
    conformal_scores,
    conformal_spread,
    fit_spec,
    sample_paths,
    training_windows,
)
from rnnkit.timeseries._likelihood import NegativeLogLikelihood, get_likelihood
from rnnkit.timeseries._panel import Panel, panel_from_frame, read_panel

_CELLS = {"lstm": LSTM, "gru": GRU}


def as_panel(data: Any, what: str = "data") -> Panel:
    """A :class:`Panel` from a Panel, a long-format CSV path or a pandas DataFrame."""
    if isinstance(data, Panel):
        return data
    if isinstance(data, (str, os.PathLike)):
        return read_panel(data)
    if hasattr(data, "columns") and hasattr(data, "__getitem__"):
        return panel_from_frame(data)
    raise DataError(f"{what}: expected a Panel, a CSV path or a pandas DataFrame in long format "
                    f"(unique_id, ds, y), got {type(data).__name__}")


def _network(spec: DeepARSpec, *, stateful: bool, seed: int | None = None) -> Sequential:
    net = spec.network
    cell = _CELLS[net["cell"]]
    drop = float(net.get("dropout", 0.0))
    layers: list[Any] = [cell(int(net["units"]), return_sequences=True, stateful=stateful, dropout=drop,
                              seed=None if seed is None else seed + j) for j in range(int(net["layers"]))]
    layers.append(Dense(get_likelihood(spec.likelihood).k, seed=None if seed is None else seed + 100))
    return Sequential(layers, input_shape=(None, spec.n_features))


class DeepAR:
    """``DeepAR(horizon, *, context=None, likelihood="student_t", cell="lstm", units=40,
    layers=2, dropout=0.1, epochs=40, patience=5, batch_size=64, lr=3e-3, clipnorm=10.0,
    max_windows=256, lags=None, calibration="conformal", calibration_level=0.8,
    calibration_windows=4, seed=0)``.

    ``fit(data)`` trains one global model on every series of a panel (a :class:`Panel`, a
    long-format CSV path or a pandas DataFrame; covariate columns are known-future inputs);
    ``forecast(data, num_samples=200, seed=0, future=None)`` gives a :class:`Forecast` of the
    ``horizon`` rows after each series' end (``future``: the covariates of those rows, for a
    model with covariates); ``save(path)`` / ``DeepAR.load(path)``.

    ``context`` (rows the forecast conditions on, and the scale's span) defaults to twice the
    horizon; ``lags`` to 1 and the panel's season; ``max_windows`` caps the training windows
    of one series (evenly spaced, the last included); ``dropout`` drops the recurrent layers'
    inputs in training (DeepAR's regulariser); ``clipnorm`` clips the gradients' global norm.

    With ``patience`` > 0, the last ``horizon`` rows of each series are validation rows: the
    network trains on the windows that end before them, is scored after each epoch on each
    series' last window, stops after ``patience`` epochs without a better score and keeps the
    best epoch's weights (a global model memorises its series when trained too long). Each
    series then needs ``horizon`` rows more.

    With ``calibration="conformal"`` (the default) the intervals are calibrated by split
    conformal prediction over ``calibration_windows`` = K rolling-origin windows (default 4) at
    each series' end: window ``k`` (0 .. K - 1) is the ``horizon`` rows from origin ``len -
    horizon - (K - 1 - k) step``, ``step = ceil(horizon / K)`` (the windows cover the last
    ``horizon + (K - 1) step`` < 2 horizon rows). A calibration model
    (:attr:`calibration_model`), trained as the final one but without those rows, forecasts
    each window from the rows before its origin; then the final model trains on every row as
    it would without calibration (so its median is the same). Each point is scored
    by how many half-widths of the central ``calibration_level`` interval it lies from the
    median (a scale-free score); and every later forecast's paths are spread about their median
    by the finite-sample conformal quantile of the scores, the ``ceil((n + 1)
    calibration_level)``-th smallest of ``n``: of each horizon step's ``n = series x K`` scores
    where ``n`` >= ``ceil(level (1 - level) / 0.05^2)`` (64 for 0.8: the step's coverage then has
    a binomial s.e. of at most 5 points), else of all ``series x K x horizon`` scores pooled
    (:func:`~rnnkit.timeseries._deepar.conformal_spread`; the median is unchanged). The
    network's one-step distribution is fitted on the rows it trained on; a forecast ``horizon``
    steps ahead also meets level shifts and trends it did not see, and the calibration measures
    that on rows it did not train on. Windows of one series overlap and are correlated, so with
    few series the factor is still noisy. ``calibration=None`` keeps the sampled spread."""

    def __init__(self, horizon: int, *, context: int | None = None, likelihood: str = "student_t",
                 cell: str = "lstm", units: int = 40, layers: int = 2, dropout: float = 0.1,
                 epochs: int = 40, patience: int = 5, batch_size: int = 64, lr: float = 3e-3,
                 clipnorm: float = 10.0,
                 max_windows: int | None = 256,
                 lags: tuple[int, ...] | None = None, calibration: str | None = "conformal",
                 calibration_level: float = 0.8, calibration_windows: int = 4, seed: int = 0) -> None:
        self.horizon = check_int(horizon, "horizon", "DeepAR", lo=1)
        self.context = check_int(context if context is not None else 2 * self.horizon, "context", "DeepAR",
                                 lo=1)
        self.likelihood = get_likelihood(likelihood).name
        if cell not in _CELLS:
            raise InvalidParameterError(f"DeepAR: cell must be one of {', '.join(_CELLS)}, got {cell!r}")
        self.cell = cell
        self.units = check_int(units, "units", "DeepAR", lo=1)
        self.layers = check_int(layers, "layers", "DeepAR", lo=1)
        self.epochs = check_int(epochs, "epochs", "DeepAR", lo=1)
        self.patience = check_int(patience, "patience", "DeepAR", lo=0)
        self.batch_size = check_int(batch_size, "batch_size", "DeepAR", lo=1)
        self.lr = check_float(lr, "lr", "DeepAR", lo=0.0, lo_open=True)
        self.clipnorm = check_float(clipnorm, "clipnorm", "DeepAR", lo=0.0, lo_open=True)
        self.dropout = check_float(dropout, "dropout", "DeepAR", lo=0.0, hi=1.0, hi_open=True)
        self.max_windows = None if max_windows is None else check_int(max_windows, "max_windows", "DeepAR",
                                                                      lo=1)
        self.lags = lags
        if not (calibration is None or (isinstance(calibration, str) and calibration == "conformal")):
            raise InvalidParameterError(f"DeepAR: calibration must be 'conformal' or None, "
                                        f"got {calibration!r}")
        self.calibration = calibration
        self.calibration_level = check_float(calibration_level, "calibration_level", "DeepAR", lo=0.0, hi=1.0,
                                             lo_open=True, hi_open=True)
        self.calibration_windows = check_int(calibration_windows, "calibration_windows", "DeepAR", lo=1)
        self.seed = check_int(seed, "seed", "DeepAR", lo=0)
        self.spec: DeepARSpec | None = None
        self.network: Sequential | None = None
        self.history: dict[str, list[float]] = {}
        #: the model trained without the calibration rows, whose forecasts of them gave the
        #: conformal factors (None before fit, after load and without calibration)
        self.calibration_model: DeepAR | None = None

    def fit(self, data: Any, *, verbose: int = 0) -> DeepAR:
        """Train on every series of ``data``; returns self. Each series needs ``context +
        horizon + largest lag`` rows, ``horizon`` more with ``patience`` and ``horizon + (K - 1)
        step`` more with calibration (DataError naming the first that has fewer)."""
        panel = as_panel(data)
        spec = fit_spec(panel, self.horizon, self.context, self.likelihood, self.lags,
                        {"cell": self.cell, "units": self.units, "layers": self.layers,
                         "dropout": self.dropout})
        H, K = self.horizon, self.calibration_windows
        self.calibration_model = None
        c: tuple[float, ...] = ()
        record: dict[str, Any] = {}
        if self.calibration:
            rows = calibration_rows(H, K)
            for s in panel.series:
                spec.check_series(s, "training", training=True, validation=rows + (H if self.patience else 0))
            # the calibration model: the same training on each series without its last `rows` rows
            cal = copy.copy(self)
            cal.calibration, cal.calibration_model = None, None
            cal.network, cal.history = self._train(spec, panel.split(rows)[0], 0)
            cal.spec = spec
            step = calibration_step(H, K)
            scores, inside = [], []
            for k in range(K):
                # window k: the H rows from origin len - H - (K - 1 - k) step, forecast from the rows before
                cut = (K - 1 - k) * step
                before, after = (panel.split(cut)[0] if cut else panel).split(H)
                fc = cal.forecast(before, num_samples=200, seed=self.seed,
                                  future=after if panel.covariate_names else None)
                actual = np.stack([s.y for s in after.series])
                scores.append(conformal_scores(fc, actual, self.calibration_level))
                inside.append(fc.coverage(actual, self.calibration_level))
            c, per_step = conformal_spread(np.concatenate(scores), self.calibration_level)
            record = {"method": "conformal", "level": self.calibration_level, "windows": K, "step": step,
                      "points": int(sum(a.size for a in scores)), "per_step": per_step,
                      "coverage_before": float(np.mean(inside))}
            self.calibration_model = cal
        net, hist = self._train(spec, panel, verbose)
        self.spec = dataclasses.replace(spec, spread=c, calibration=record)
        self.network, self.history = net, hist
        return self

    def _train(self, spec: DeepARSpec, panel: Panel,
               verbose: int) -> tuple[Sequential, dict[str, list[float]]]:
        """A network trained on ``panel``'s windows (with ``patience``: on those ending before each
        series' last ``horizon`` rows, stopped early on them) and its loss history."""
        x, y = training_windows(spec, panel, self.max_windows, held_out=self.horizon if self.patience else 0)
        net = _network(spec, stateful=False, seed=self.seed)
        net.compile(Adam(self.lr, global_clipnorm=self.clipnorm), loss=NegativeLogLikelihood(spec.likelihood))
        extra: dict[str, Any] = {}
        if self.patience:
            extra = {"validation_data": training_windows(spec, panel, None, last=True),
                     "callbacks": [EarlyStopping(patience=self.patience, restore_best_weights=True)]}
        hist = net.fit(x, y, epochs=self.epochs, batch_size=self.batch_size, seed=self.seed, verbose=verbose,
                       **extra)
        return net, dict(hist.history)

    def _fitted(self) -> tuple[DeepARSpec, Sequential]:
        if self.spec is None or self.network is None:
            raise InvalidParameterError("DeepAR: not trained yet: call fit(data) or DeepAR.load(path) first")
        return self.spec, self.network

    def forecast(self, data: Any, *, num_samples: int = 200, seed: int = 0, future: Any = None,
                 calibrated: bool = True) -> Forecast:
        """Sample paths of the ``horizon`` rows after the end of each series of ``data`` (the
        training series, or any of them with at least ``context + largest lag`` rows), spread
        about their median by the conformal factor ``spec.spread`` (``calibrated=False``: as
        sampled)."""
        spec, net = self._fitted()
        if not calibrated:
            spec = dataclasses.replace(spec, spread=())
        stepper = _network(spec, stateful=True)
        stepper.set_weights(net.get_weights())

        def step(x: np.ndarray) -> np.ndarray:
            return np.asarray(stepper.predict(x, batch_size=len(x)))

        return sample_paths(spec, as_panel(data), (step, stepper.reset_states), num_samples, seed,
                            None if future is None else as_panel(future, "future"))

    def save(self, path: str | os.PathLike[str]) -> Path:
        """One safetensors file: the network (architecture and weights) and the settings
        (:data:`~rnnkit.timeseries._deepar.DEEPAR_KEY`). Atomic."""
        spec, net = self._fitted()
        plain = _network(spec, stateful=False)
        plain.set_weights(net.get_weights())
        p = Path(path)
        save_model(plain, p, metadata={DEEPAR_KEY: spec.to_json()})
        return p

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> DeepAR:
        """The model :meth:`save` wrote (FileFormatError for a model file without DeepAR
        settings)."""
        text = read_metadata(path).get(DEEPAR_KEY)
        if text is None:
            raise FileFormatError(f"{path}: not a DeepAR model file (no {DEEPAR_KEY!r} settings); "
                                  f"DeepAR.save and 'rnnkit train --panel' write them")
        spec = DeepARSpec.from_json(text)
        net = spec.network
        m = cls(spec.horizon, context=spec.context, likelihood=spec.likelihood, cell=str(net["cell"]),
                units=int(net["units"]), layers=int(net["layers"]), dropout=float(net.get("dropout", 0.0)),
                lags=spec.lags, calibration="conformal" if spec.calibration else None,
                calibration_level=float(spec.calibration.get("level", 0.8)),
                calibration_windows=int(spec.calibration.get("windows", 1)))
        m.spec, m.network = spec, load_model(path)
        return m


def is_deepar_file(path: str | os.PathLike[str]) -> bool:
    """Whether the model file at ``path`` holds DeepAR settings."""
    return DEEPAR_KEY in read_metadata(path)


__all__ = ["DeepAR", "as_panel", "is_deepar_file"]
