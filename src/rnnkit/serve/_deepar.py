"""A DeepAR model file served (:class:`rnnkit.io.DeepAR`): ``POST /v1/predict`` takes the recent
rows of one or more series in long format — the columns ``rnnkit predict MODEL PANEL.csv``
reads — and answers the sample mean and quantiles of the ``horizon`` rows after each series'
end, the numbers ``DeepAR.load(path).forecast(...)`` gives for the same series::

    {"unique_id": [...], "ds": [...], "y": [...], <covariate>: [...], ...     the history
     "future"?: {"unique_id": [...], "ds": [...], <covariate>: [...]},        a model with covariates:
                                                                                their horizon rows
     "num_samples"?: 200, "seed"?: 0, "quantiles"?: [0.1, 0.5, 0.9]}
    -> {"ids": [...], "ds": [[...]] (N, H), "mean": (N, H),
        "quantiles": {"0.1": (N, H), ...}, "num_samples": S, "seed": seed}

Dates are ISO text (``2024-03-01``, ``2024-03-01T12:00:00``); rows may come in any order and
each series is sorted by date (:meth:`rnnkit.timeseries._panel.Panel.from_columns`, whose rules
apply). The series are forecast in the order their ids first appear.

**Seeding.** The paths are drawn by NumPy's ``default_rng(seed)`` (PCG64), the request's
``seed`` (default :data:`DEFAULT_SEED`), for every path of every series of the request in one
batch: series ``i``'s paths are rows ``i * S .. i * S + S - 1``. So a request is reproducible:
the same series (in the same order), ``num_samples`` and ``seed`` give the same numbers, bit for
bit, and they are ``DeepAR.forecast(panel, num_samples=S, seed=seed)`` of the panel of those
columns; a series' numbers depend on what else the request holds (send it alone for numbers
that do not).

Every refusal is a typed 4xx: 415 for a body that is not JSON; 422 for a missing or unknown
field (``missing_field``, ``unknown_field``), rows the panel rules or the model refuse (a series
the model was not trained on, one shorter than ``context + largest lag``, covariates missing:
``bad_series``), and ``num_samples`` / ``seed`` / ``quantiles`` out of range
(``bad_parameter``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._numbers import check_int
from rnnkit.io import DeepAR
from rnnkit.serve._errors import unprocessable
from rnnkit.timeseries import DataError
from rnnkit.timeseries._deepar import DeepARSpec, labels
from rnnkit.timeseries._panel import Panel

DEFAULT_SAMPLES = 200
DEFAULT_SEED = 0
DEFAULT_QUANTILES = (0.1, 0.5, 0.9)
#: the most sample paths one request may draw (series x num_samples)
MAX_PATHS = 100_000
#: the most quantiles one request may ask for
MAX_QUANTILES = 99
_SETTINGS = ("num_samples", "seed", "quantiles", "future")


def spec_of(model: DeepAR) -> DeepARSpec:
    """The settings of a trained (or loaded) DeepAR model; InvalidParameterError for one that is
    neither."""
    if model.spec is None or model.network is None:
        raise InvalidParameterError("serve: the DeepAR model is not trained; call fit(data) or "
                                    "DeepAR.load(path) first")
    return model.spec


def describe(model: DeepAR) -> dict[str, Any]:
    """The ``deepar`` part of ``/v1/model``: what a request holds and what the answer gives."""
    spec = spec_of(model)
    return {
        "horizon": spec.horizon, "context": spec.context, "lags": list(spec.lags),
        "rows_needed": spec.history_needed, "likelihood": spec.likelihood, "ids": list(spec.ids),
        "covariates": list(spec.covariate_names), "frequency": spec.freq_name or None,
        "defaults": {"num_samples": DEFAULT_SAMPLES, "seed": DEFAULT_SEED,
                     "quantiles": list(DEFAULT_QUANTILES)},
        "max_paths": MAX_PATHS,
        "request": "long-format columns unique_id, ds, y (and the covariates), at least rows_needed "
                   "rows per series; future: the covariates' horizon rows",
        "seeding": "numpy default_rng(seed) draws every path of the request in one batch, series in "
                   "the order their ids first appear: the same request gives the same numbers",
    }


def _field(doc: Any, name: str, where: str) -> Any:
    """``doc[name]`` (422 when ``doc`` is not a JSON object or has no ``name``)."""
    if not isinstance(doc, dict):
        raise unprocessable("bad_body", f"{where}the body must be a JSON object, got a {type(doc).__name__}",
                            expected="a JSON object")
    if name not in doc:
        raise unprocessable("missing_field", f"{where}the body has no {name!r}; it has {sorted(doc)[:10]}",
                            expected=name)
    return doc[name]


def _column(doc: dict[str, Any], name: str, where: str) -> list[Any]:
    value = _field(doc, name, where)
    if not isinstance(value, list):
        raise unprocessable("bad_series", f"{where}{name!r} must be a list (one value per row), got a "
                                          f"{type(value).__name__}", expected="a list")
    return value


def _panel(doc: Any, covariates: tuple[str, ...], *, future: bool) -> Panel:
    where = "future: " if future else ""
    _field(doc, "unique_id", where)       # a JSON object with the id column, else 422
    allowed = {"unique_id", "ds", *covariates} | ({"y"} if future else {"y", *_SETTINGS})
    unknown = sorted(k for k in doc if k not in allowed)
    if unknown:
        raise unprocessable("unknown_field", f"{where}the body has field(s) {unknown} this model does not "
                                             f"read; it reads {sorted(allowed)}", expected=sorted(allowed),
                            got=unknown[:10])
    ids = _column(doc, "unique_id", where)
    ds = _column(doc, "ds", where)
    y = _column(doc, "y", where) if not future or "y" in doc else [0.0] * len(ids)
    cov = {c: _column(doc, c, where) for c in covariates}
    try:
        return Panel.from_columns(ids, ds, y, cov, what="the future covariates" if future else "the request")
    except (DataError, ValueError, TypeError) as e:
        raise unprocessable("bad_series", f"{where}{e}") from None


def _settings(doc: dict[str, Any], n_series: int) -> tuple[int, int, tuple[float, ...]]:
    try:
        samples = check_int(doc.get("num_samples", DEFAULT_SAMPLES), "num_samples", "DeepAR forecast",
                            lo=1, hi=max(1, MAX_PATHS // n_series))
        seed = check_int(doc.get("seed", DEFAULT_SEED), "seed", "DeepAR forecast", lo=0, hi=2**63 - 1)
    except InvalidParameterError as e:
        raise unprocessable("bad_parameter", f"{e} (at most {MAX_PATHS} paths: series x num_samples)"
                            ) from None
    qs = doc.get("quantiles", list(DEFAULT_QUANTILES))
    ok = (isinstance(qs, list) and 0 < len(qs) <= MAX_QUANTILES
          and all(isinstance(q, (int, float)) and not isinstance(q, bool) and 0 < q < 1 for q in qs))
    if not ok:
        raise unprocessable("bad_parameter", f"quantiles must be a list of 1 to {MAX_QUANTILES} numbers "
                                             f"strictly between 0 and 1, got {str(qs)[:80]}",
                            expected="numbers in (0, 1)", got=str(qs)[:80])
    return samples, seed, tuple(float(q) for q in qs)


def answer(model: DeepAR, doc: Any) -> dict[str, Any]:
    """The answer to one ``/v1/predict`` document (module docstring); RequestError (422) for
    what the model cannot take."""
    spec = spec_of(model)
    panel = _panel(doc, spec.covariate_names, future=False)
    samples, seed, quantiles = _settings(doc, len(panel))
    fut_doc = doc.get("future")
    if fut_doc is not None and not spec.covariate_names:
        raise unprocessable("unknown_field", "future: this model reads no covariates; leave out 'future'",
                            expected="no 'future'")
    future = None if fut_doc is None else _panel(fut_doc, spec.covariate_names, future=True)
    try:
        fc = model.forecast(panel, num_samples=samples, seed=seed, future=future)
    except DataError as e:
        raise unprocessable("bad_series", str(e)) from None
    qv = fc.quantile(list(quantiles))
    for what, arr in (("mean", fc.mean), ("quantiles", qv)):
        if not np.isfinite(arr).all():
            raise unprocessable("non_finite_output", f"the forecast's {what} is not finite for these series")
    return {"ids": list(fc.ids), "ds": [labels(row) for row in fc.index], "mean": fc.mean.tolist(),
            "quantiles": {repr(q): qv[j].tolist() for j, q in enumerate(quantiles)},
            "num_samples": samples, "seed": seed}


__all__ = ["DEFAULT_QUANTILES", "DEFAULT_SAMPLES", "DEFAULT_SEED", "MAX_PATHS", "answer", "describe",
           "spec_of"]
