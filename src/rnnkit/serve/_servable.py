"""What the server serves: a model read from a file (or handed over from Python), its input
contract, a batched ``predict``, and the stream stepping of :mod:`rnnkit.serve._stepper`.

Batching is allowed only where it changes no bit: at start the server runs the model on random
batches of several sizes and compares every probed row with the same input run alone
(:func:`rows_independent`). When they differ, requests are computed one by one (and
``/v1/model`` says so); answers never depend on what else was in the batch.

A forecaster (a model file written by ``rnnkit train``, or a :class:`rnnkit.timeseries.Forecaster`)
is served with the preprocessing it was trained with: ``/v1/predict`` takes windows of raw data
rows and answers forecasts in data units, through :class:`~rnnkit.timeseries.ForecastSpec`, the
path ``rnnkit predict`` takes, so the answers are its bits.

A DeepAR model (a file written by :meth:`rnnkit.io.DeepAR.save` or ``rnnkit train --panel``, or
a trained :class:`rnnkit.io.DeepAR`) is served by sampling: ``/v1/predict`` takes series in
long format and answers quantiles, :mod:`rnnkit.serve._deepar`.
"""

from __future__ import annotations

import hashlib
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._files import check_regular, open_regular, read_head
from rnnkit._safetensors import read_safetensors
from rnnkit._version import __version__
from rnnkit.io import DeepAR, load_keras, load_model, load_torch_rnn
from rnnkit.io._model import MODEL_FORMAT
from rnnkit.io._torch_file import _sniff
from rnnkit.layers import Embedding
from rnnkit.models import Model
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNNet
from rnnkit.serve._deepar import describe as describe_deepar
from rnnkit.serve._deepar import spec_of
from rnnkit.serve._stepper import StreamPlan, plan_streams
from rnnkit.timeseries import ForecastSpec

#: batch sizes probed for bit-equality with a request run alone (the row limit is added)
PROBE_SIZES = (2, 3, 4, 5, 7, 8, 9, 16, 17, 33, 64, 65)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The SHA-256 of a file's bytes (hex)."""
    h = hashlib.sha256()
    with open_regular(path) as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def weights_sha256(model: Any) -> str:
    """The SHA-256 over a model's weights (names, dtypes, shapes and bytes, in name order)."""
    h = hashlib.sha256()
    named = model.state_dict() if isinstance(model, RNNNet) else {
        n: lay.weight(w) for n, (lay, w) in model.named_weights().items()}
    for name in sorted(named):
        a = np.ascontiguousarray(named[name]).reshape(np.shape(named[name]))   # (0-d stays 0-d)
        h.update(f"{name}|{a.dtype.str}|{a.shape}|".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def load_file(path: str | os.PathLike[str]) -> Any:
    """The model in ``path``, the reader chosen by the file's content: a zip archive is a Keras 3
    ``.keras`` file (:func:`rnnkit.load_keras`); a safetensors file with rnnkit model metadata is
    read by :func:`rnnkit.load_model`, any other safetensors file as PyTorch LSTM/GRU/RNN weights
    (:func:`rnnkit.load_torch_rnn`). Anything else raises FileFormatError naming what it is; a
    path that is not a regular file (a FIFO, a device, a directory) is refused before it is
    opened."""
    p = check_regular(path, "a model file")  # a FIFO, device or directory: refused, never opened
    head = read_head(p, 4)
    if head == b"PK\x03\x04" and zipfile.is_zipfile(p):
        with zipfile.ZipFile(p) as z:
            if "config.json" in z.namelist():
                return load_keras(p)
    _sniff(p)  # names a pickle, an HDF5 file, a foreign zip, ... without unpickling anything
    if read_safetensors(p)[1].get("format") == MODEL_FORMAT:
        return load_model(p)
    return load_torch_rnn(p)


def rows_independent(fn: Callable[[int], list[tuple[np.ndarray, np.ndarray]]], sizes: list[int]) -> bool:
    """Whether every ``fn(n)`` pair ``(row computed in a batch of n, the same row alone)`` is
    equal bit for bit, for every n in ``sizes``."""
    for n in sizes:
        for in_batch, alone in fn(n):
            if in_batch.shape != alone.shape or in_batch.tobytes() != alone.tobytes():
                return False
    return True


def _probe_rows(n: int) -> list[int]:
    return sorted({0, 1 % n, n // 2, n - 1})


class Servable:
    """A model the server can run: ``predict`` for whole sequences, and (when the model can be
    stepped) streams whose state the server keeps.

    ``model``: an rnnkit ``Sequential`` / ``GraphModel`` with one input, or an
    :class:`rnnkit.rnn.RNNNet` (PyTorch layout; the server always speaks batch-first
    ``(batch, timesteps, features)`` and converts). ``max_rows``: the largest batch the
    micro-batcher forms (probed for bit-equality). ``source`` / ``sha256``: the file it came from.
    ``forecast``: the forecaster's stored preprocessing, applied to every predict request (raw
    data rows in, forecasts in data units out; no streams: a forecaster reads whole windows).
    ``deepar``: a DeepAR model whose network ``model`` is; predict requests are answered by its
    sampling (:mod:`rnnkit.serve._deepar`; no streams).
    """

    def __init__(self, model: Any, *, max_rows: int = 1024, max_timesteps: int = 4096,
                 source: str | None = None, sha256: str | None = None,
                 forecast: ForecastSpec | None = None, deepar: DeepAR | None = None) -> None:
        if isinstance(model, RecurrentLayer) or not isinstance(model, (Model, RNNNet)):
            raise InvalidParameterError(
                f"serve: expected an rnnkit model (Sequential, GraphModel) or an rnnkit.rnn.RNNNet, got "
                f"{type(model).__name__}; wrap a layer in a Sequential")
        self.model: Any = model
        m: Any = model
        self.source = source
        self.is_net = isinstance(model, RNNNet)
        if not self.is_net:
            if not m.built:
                raise InvalidParameterError("serve: the model is not built; call build(shape) first")
            if m.n_inputs != 1:
                raise InvalidParameterError(f"serve: the model takes {m.n_inputs} inputs; the server "
                                            f"serves models with one input")
            stateful = [lay.name for lay in m.layers if getattr(lay, "stateful", False)]
            if stateful:
                raise InvalidParameterError(
                    f"serve: layer(s) {stateful} are stateful (they carry state from one call to the "
                    f"next, which would mix clients); serve a copy built with stateful=False and use "
                    f"streams")
        self.sha256 = sha256 if sha256 is not None else weights_sha256(m)
        if self.is_net:
            self.sample_shape: tuple[int | None, ...] = (None, m.in_dim)
            self.dtype = np.dtype(m.dtype)
            self.input_dtype = self.dtype
        else:
            self.sample_shape = tuple(m.input_shapes()[0])[1:]
            first = getattr(m, "called_layers", m.layers)[0]  # a GraphModel's layers start with inputs
            self.dtype = np.dtype(first.dtype)
            self.input_dtype = np.dtype(np.int64) if isinstance(first, Embedding) else self.dtype
        if len(self.sample_shape) < (1 if self.input_dtype.kind in "iu" else 2):
            raise InvalidParameterError(f"serve: the model's input {self.sample_shape} has no time axis; "
                                        f"expected (batch, timesteps, ...)")
        fixed_t = self.sample_shape[0]
        if fixed_t is not None and int(fixed_t) > max_timesteps:
            raise InvalidParameterError(
                f"serve: the model takes exactly {fixed_t} timesteps per sequence, more than the "
                f"{max_timesteps} a request may hold (max_timesteps, --max-timesteps); every request would "
                f"be refused. Serve a model built for at most {max_timesteps} timesteps (or None), or "
                f"raise --max-timesteps if the memory allows")
        self.max_rows = int(max_rows)
        self.sizes = sorted({s for s in PROBE_SIZES if s <= self.max_rows} | {self.max_rows})
        self.streams: StreamPlan | None
        self.streams, self.stream_reason = plan_streams(model, self.sizes)
        self.forecast = forecast
        if forecast is not None:
            if self.is_net or self.sample_shape != (forecast.window, len(forecast.features)):
                raise InvalidParameterError(
                    f"serve: the forecast settings are for windows of {forecast.window} rows of "
                    f"{len(forecast.features)} feature(s); the model takes {self.sample_shape}")
            self.streams, self.stream_reason = None, (
                "a forecaster reads whole windows of data rows, scaled as in training; send them "
                "to /v1/predict")
        self.deepar = deepar
        if deepar is not None:
            if forecast is not None or model is not deepar.network or (
                    self.sample_shape != (None, spec_of(deepar).n_features)):
                raise InvalidParameterError(
                    f"serve: a DeepAR model is served with its own network (input (None, "
                    f"{spec_of(deepar).n_features})) and no forecast settings; got input {self.sample_shape}")
            self.streams, self.stream_reason = None, (
                "a DeepAR model forecasts by sampling from each series' recent rows; send them to "
                "/v1/predict")
        self.lengths_ok = True
        try:
            self.output_shapes = self._probe_outputs()
            self.predict_batched = rows_independent(self._predict_pairs, self.sizes)
        except MemoryError:
            raise InvalidParameterError(
                f"serve: probing the model with batches of up to {max(self.sizes)} sequences of "
                f"{self.probe_T()} timesteps (input {self.sample_shape}) ran out of memory; lower "
                f"--max-rows or serve a model with a smaller input") from None

    # -- the input contract ------------------------------------------------------------------
    def probe_T(self) -> int:
        T = self.sample_shape[0]
        return 3 if T is None else int(T)

    def random_input(self, n: int, T: int, rng: np.random.Generator) -> np.ndarray:
        """``n`` random samples of ``T`` timesteps in the model's input dtype."""
        shape = (n, T, *[d if d is not None else 2 for d in self.sample_shape[1:]])
        if self.input_dtype.kind in "iu":
            vocab = int(getattr(getattr(self.model, "called_layers", self.model.layers)[0], "input_dim", 2))
            return rng.integers(0, vocab, size=shape).astype(self.input_dtype)
        return rng.standard_normal(shape).astype(self.dtype)

    def _probe_outputs(self) -> list[tuple[int | None, ...]]:
        rng = np.random.default_rng(0)
        x = self.random_input(2, self.probe_T(), rng)
        outs = self.predict(x, None)
        try:
            self.predict(x, np.array([1, self.probe_T()], dtype=np.int64))
        except InvalidInputError:
            self.lengths_ok = False
        free_t = self.sample_shape[0] is None
        return [tuple(None if (k == 0 or (k == 1 and free_t and o.ndim > 2)) else int(d)
                      for k, d in enumerate(o.shape)) for o in outs]

    def _predict_pairs(self, n: int) -> list[tuple[np.ndarray, np.ndarray]]:
        rng = np.random.default_rng(n)
        T = self.probe_T()
        x = self.random_input(n, T, rng)
        lengths = rng.integers(1, T + 1, size=n).astype(np.int64) if self.lengths_ok else None
        pairs = []
        for lens in (None, lengths) if lengths is not None else (None,):
            full = self.predict(x, lens)
            for i in _probe_rows(n):
                alone = self.predict(x[i:i + 1], None if lens is None else lens[i:i + 1])
                pairs += [(f[i:i + 1], a) for f, a in zip(full, alone, strict=True)]
        return pairs

    # -- passes ------------------------------------------------------------------------------
    def predict(self, x: np.ndarray, lengths: np.ndarray | None,
                mask: np.ndarray | None = None) -> list[np.ndarray]:
        """The model's outputs (each (B, ...)) for a checked batch ``x`` (B, T, ...), with
        ``lengths`` ((B,) ints, PyTorch's packed semantics), or ``mask`` ((B, T) booleans,
        Keras' masking), or neither."""
        if self.is_net:
            net = self.model
            xin = x if net.config.batch_first else x.transpose(1, 0, 2)

            def run() -> Any:
                return net.forward(xin, Ctx.inference().set_mask(mask, lengths=lengths))

            y = WEIGHTS.read(run)   # one whole step's weights while the net trains in another thread
            y = y[0] if isinstance(y, list) else y
            return [np.ascontiguousarray(y if net.config.batch_first else y.transpose(1, 0, 2))]
        out = self.model.predict(x, lengths=lengths, mask=mask)
        return list(out) if isinstance(out, list) else [out]

    def describe(self) -> dict[str, Any]:
        """The ``/v1/model`` document (a forecaster's: what its requests and answers hold)."""
        doc = self._describe()
        spec = self.forecast
        if spec is not None:
            doc.update({
                "input_shape": [None, spec.rows_needed, len(spec.features)], "input_dtype": "float64",
                "output_shapes": [[None, 1]], "output_dtype": "float64", "lengths": False,
                "forecast": {
                    "target": spec.target, "features": list(spec.features), "window": spec.window,
                    "rows_per_window": spec.rows_needed, "horizon": spec.horizon,
                    "difference": spec.difference, "log": spec.log, "seasonal": spec.seasonal,
                    "transform": spec.x_scaler.transform, "scale": spec.scale,
                    "missing": spec.missing, "index_name": spec.index_name,
                    "target_needed": spec.difference and spec.target not in spec.features,
                    "units": "x: raw data rows (as in the CSV); outputs: forecasts of the target in "
                             "data units, one per window",
                }})
        if self.deepar is not None:
            doc.update({"input_shape": None, "input_dtype": None, "output_shapes": None, "lengths": False,
                        "deepar": describe_deepar(self.deepar)})
        return doc

    def _describe(self) -> dict[str, Any]:
        return {
            "model": type(self.model).__name__,
            "name": getattr(self.model, "name", None),
            "source": None if self.source is None else Path(self.source).name,
            "sha256": self.sha256,
            "sha256_of": "file" if self.source is not None else "weights",
            "rnnkit_version": __version__,
            "input_shape": [None, *self.sample_shape],
            "input_dtype": self.input_dtype.name,
            "output_shapes": [list(s) for s in self.output_shapes],
            "output_dtype": self.dtype.name,
            "lengths": self.lengths_ok,
            "predict_batching": "batched" if self.predict_batched else
                                "one request at a time (the model's rows are not batch-independent)",
            "streams": None if self.streams is None else self.streams.describe(),
            "streams_unavailable": self.stream_reason,
        }


__all__ = ["Servable", "file_sha256", "load_file", "rows_independent", "weights_sha256"]
