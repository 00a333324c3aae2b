"""A forecaster's file: the model file with its forecast settings (:data:`SPEC_KEY` in the
safetensors metadata), written by ``rnnkit train`` / ``rnnkit demo`` or :func:`save_forecaster`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from safetensors import SafetensorError, safe_open

from rnnkit._errors import FileFormatError, InvalidParameterError
from rnnkit._files import check_regular
from rnnkit._numbers import show
from rnnkit.io._model import load_model, save_model
from rnnkit.io._sniff import sniff
from rnnkit.timeseries import SPEC_KEY, DataError, Forecaster, ForecastSpec


def read_metadata(path: str | os.PathLike[str]) -> dict[str, str]:
    """The safetensors metadata of ``path``; ``{}`` for a model file of another format (a Keras
    archive: it has none); FileFormatError when it is safetensors that cannot be read."""
    p = check_regular(path, "a model file")
    if sniff(p) != "safetensors":
        return {}
    try:
        with safe_open(p, framework="numpy") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, ValueError, TypeError, OSError) as e:
        raise FileFormatError(f"{path}: not a safetensors file ({e})") from None


def read_forecast_spec(path: str | os.PathLike[str]) -> ForecastSpec | None:
    """The forecast settings stored in the model file at ``path``; None for a model saved
    without them. Damaged settings raise DataError."""
    text = read_metadata(path).get(SPEC_KEY)
    return None if text is None else ForecastSpec.from_json(text)


def save_forecaster(model: Any, spec: ForecastSpec, path: str | os.PathLike[str]) -> Path:
    """Write the model file at ``path`` (:func:`save_model`: one safetensors file, the
    architecture in its metadata) with ``spec`` as one more metadata entry, :data:`SPEC_KEY`.
    The write is atomic (temporary file, then rename)."""
    if not isinstance(spec, ForecastSpec):
        raise InvalidParameterError(f"save_forecaster: spec must be a ForecastSpec, got {show(spec)} "
                                    f"({type(spec).__name__})")
    p = Path(path)
    save_model(model, p, metadata={SPEC_KEY: spec.to_json()})
    return p


def load_forecaster(path: str | os.PathLike[str]) -> Forecaster:
    """The forecaster in the model file at ``path``: its network and the preprocessing it was
    trained with. A missing file is a DataError; a model file saved without forecast settings
    (a plain model, or another format) is a FileFormatError saying so."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such model file")
    if p.is_dir():
        raise DataError(f"{p}: is a directory, expected a model file")
    model = load_model(p)           # a file that is no rnnkit model is refused as such first
    spec = read_forecast_spec(p)
    if spec is None:
        raise FileFormatError(f"{p}: this model was saved without forecast settings (window, scaler); "
                              "only models written by 'rnnkit train' or 'rnnkit demo' (or "
                              "rnnkit.io.save_forecaster) can forecast from data rows")
    return Forecaster(model, spec)


__all__ = ["load_forecaster", "read_forecast_spec", "read_metadata", "save_forecaster"]
