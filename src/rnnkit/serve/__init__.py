"""Serving a model over HTTP: batched ``predict`` and stateful streams, ``rnnkit serve MODEL``
from the command line or :func:`app` from Python (an ASGI app for any ASGI server).

Needs the optional ``serve`` extra (Starlette, uvicorn and orjson): ``pip install "rnnkit[serve]"``.

::

    import rnnkit as rk
    application = rk.serve.app(model, max_wait_ms=2, state_db="streams.sqlite")
    # uvicorn.run(application, host="127.0.0.1", port=8000)
"""

from __future__ import annotations

import os
from typing import Any

from rnnkit._errors import InvalidParameterError
from rnnkit.io import DeepAR, MissingDependencyError, read_forecast_spec
from rnnkit.io._deepar import is_deepar_file
from rnnkit.serve._deepar import spec_of
from rnnkit.serve._errors import RequestError
from rnnkit.serve._limits import ServeConfig, read_token_file
from rnnkit.serve._servable import Servable, file_sha256, load_file
from rnnkit.timeseries import Forecaster


def load(path: str | os.PathLike[str], *, max_rows: int = 1024, max_timesteps: int = 4096) -> Servable:
    """The model file at ``path`` (any file :func:`rnnkit.load_model`, :func:`rnnkit.load_keras` or
    :func:`rnnkit.load_torch_rnn` reads, told apart by content) ready to serve; ``/v1/model``
    reports the file's SHA-256. A forecaster's file (one with forecast settings, written by
    ``rnnkit train``) is served with its preprocessing: raw data rows in, data units out. A
    DeepAR model's file (``rnnkit train --panel``, :meth:`rnnkit.io.DeepAR.save`) answers
    quantiles of sampled paths (:mod:`rnnkit.serve._deepar`)."""
    model = load_file(path)
    deepar = DeepAR.load(path) if is_deepar_file(path) else None
    return Servable(model if deepar is None else deepar.network, max_rows=max_rows,
                    max_timesteps=max_timesteps, source=os.fspath(path), sha256=file_sha256(path),
                    forecast=None if deepar is not None else read_forecast_spec(path), deepar=deepar)


def app(model: Any, config: ServeConfig | None = None, **settings: Any) -> Any:
    """The ASGI app serving ``model`` (an rnnkit model, an :class:`rnnkit.rnn.RNNNet`, a
    :class:`rnnkit.timeseries.Forecaster` (served with its preprocessing), a trained
    :class:`rnnkit.io.DeepAR` (answering quantiles of sampled paths), a :class:`Servable`
    from :func:`load`, or a model file's path). ``config`` or keyword
    ``settings`` (the fields of :class:`ServeConfig`, not both) set batching, limits, the stream
    database and the auth token."""
    if config is not None and settings:
        raise InvalidParameterError("serve.app: pass a ServeConfig or keyword settings, not both")
    if config is not None and not isinstance(config, ServeConfig):
        raise InvalidParameterError(f"serve.app: config must be a ServeConfig or None, got "
                                    f"{type(config).__name__}")
    try:
        cfg = config if config is not None else ServeConfig(**settings)
    except TypeError as e:
        raise InvalidParameterError(f"serve.app: {e}") from None
    try:
        from rnnkit.serve._app import build_app  # the optional dependencies (Starlette, orjson) live there
    except ImportError as e:
        raise MissingDependencyError(f"rnnkit.serve needs Starlette and orjson ({e}); "
                                     f"pip install 'rnnkit[serve]'") from None
    if isinstance(model, (str, os.PathLike)):
        sv = load(model, max_rows=cfg.max_rows, max_timesteps=cfg.max_timesteps)
    elif isinstance(model, Servable):
        sv = model
    elif isinstance(model, DeepAR):
        spec_of(model)                       # not trained: InvalidParameterError saying so
        sv = Servable(model.network, max_rows=cfg.max_rows, max_timesteps=cfg.max_timesteps, deepar=model)
    elif isinstance(model, Forecaster):
        sv = Servable(model.model, max_rows=cfg.max_rows, max_timesteps=cfg.max_timesteps,
                      forecast=model.spec)
    else:
        sv = Servable(model, max_rows=cfg.max_rows, max_timesteps=cfg.max_timesteps)
    return build_app(sv, cfg)


__all__ = ["RequestError", "Servable", "ServeConfig", "app", "load", "read_token_file"]
