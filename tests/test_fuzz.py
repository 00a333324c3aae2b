"""Property tests (Hypothesis): whatever the arguments, inputs and files, nothing but an
``rnnkit.Error`` subclass or a ``TypeError`` escapes the public constructors, ``forward`` /
``backward``, ``fit`` / ``evaluate`` / ``predict`` and the loaders.

The default profile (``ci``) is small so the suite stays quick; ``RNNKIT_FUZZ=long`` runs the
long one (``RNNKIT_FUZZ=long python -m pytest tests/test_fuzz.py``). Profiles: ``conftest.py``.
"""

from __future__ import annotations

import io
import math
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit import io as rio  # noqa: E402

TYPED = (rk.Error, TypeError)
SUPPRESS = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]

# hostile values for any argument
ODD = st.sampled_from([None, "abc", "", "False", -1, 0, 1, 2, 3, 2.5, -0.5, 0.5, math.nan, math.inf,
                       -math.inf, True, False, [], [1, 2], {}, {"name": 1}, object(), np.float32(0.5),
                       np.int64(2), np.bool_(True), 10**12, 10**30, b"x", (None, 3), "float64",
                       "softmax", "tanh", rk.Softmax(5), np.array([1.0, 2.0])])


def typed_only(call: Callable[[], Any]) -> Any:
    """Run ``call``; an error that is not typed fails the property with its repr."""
    try:
        with np.errstate(all="ignore"):
            return call()
    except TYPED:
        return None
    except Exception as e:  # noqa: BLE001 - the property under test
        raise AssertionError(f"untyped {type(e).__module__}.{type(e).__name__}: {e}") from e


# -- constructors -------------------------------------------------------------------------------
CONSTRUCTORS: dict[str, Callable[..., Any]] = {
    "Dense": rk.Dense, "Dropout": rk.Dropout, "Embedding": rk.Embedding,
    "ActivationLayer": rk.ActivationLayer, "RepeatVector": rk.RepeatVector, "Reverse": rk.Reverse,
    "Concatenate": rk.Concatenate, "EarlyStopping": rk.EarlyStopping,
    "ModelCheckpoint": rk.ModelCheckpoint, "SGD": rk.SGD, "Adam": rk.Adam, "AdamW": rk.AdamW,
    "RMSprop": rk.RMSprop, "MeanSquaredError": rk.MeanSquaredError,
    "BinaryCrossEntropy": rk.BinaryCrossEntropy, "CategoricalCrossEntropy": rk.CategoricalCrossEntropy,
    "Shape": rk.Shape, "Sequential": rk.Sequential, "LearningRateScheduler": rk.LearningRateScheduler,
    "GraphBuilder": rk.GraphBuilder, "ReduceLROnPlateau": rk.ReduceLROnPlateau, "CSVLogger": rk.CSVLogger,
    "TerminateOnNaN": rk.TerminateOnNaN, "LambdaCallback": rk.LambdaCallback,
    "ProgbarLogger": rk.ProgbarLogger, "Mask": rk.Mask, "bucket_by_length": rk.data.bucket_by_length,
    "windows": rk.data.windows,
}
KEYWORDS = ["name", "dtype", "seed", "use_bias", "monitor", "patience", "min_delta", "mode",
            "restore_best_weights", "save_best_only", "learning_rate", "momentum", "clipnorm",
            "input_shape", "axis", "rate", "from_logits", "factor", "cooldown", "min_lr", "separator",
            "append", "raise_error", "stream", "epochs", "lengths", "targets", "bucket_width", "shuffle",
            "pad_value", "horizon", "batch_size", "on_epoch_end", "on_batch_end", "set_model"]


@settings(suppress_health_check=SUPPRESS)
@given(name=st.sampled_from(sorted(CONSTRUCTORS)), args=st.lists(ODD, max_size=3),
       kwargs=st.dictionaries(st.sampled_from(KEYWORDS), ODD, max_size=2))
def test_constructors_raise_only_typed_errors(name: str, args: list[Any], kwargs: dict[str, Any]) -> None:
    typed_only(lambda: CONSTRUCTORS[name](*args, **kwargs))


# -- forward / backward ---------------------------------------------------------------------------
def _layers() -> list[tuple[Callable[[], rk.Layer], int]]:
    """Layer factories and the input rank they build for."""
    return [(lambda: rk.Dense(3, seed=0), 2), (lambda: rk.Dense(2, "softmax", seed=0), 3),
            (lambda: rk.Dropout(0.3), 2), (lambda: rk.ActivationLayer("softmax"), 2),
            (lambda: rk.ActivationLayer("relu"), 3), (lambda: rk.RepeatVector(2), 2),
            (lambda: rk.Reverse(1), 3), (lambda: rk.Embedding(5, 2, seed=0), 2),
            (lambda: rk.LSTM(2, seed=0, return_sequences=True), 3),
            (lambda: rk.GRU(2, seed=0, reset_after=True), 3), (lambda: rk.SimpleRNN(2, go_backwards=True), 3),
            (lambda: rk.rnn.lstm(3, 2), 3)]


DTYPES = st.sampled_from([np.float32, np.float64, np.int64, np.bool_, np.float16, np.complex64, object,
                          np.str_])
SPECIAL = st.sampled_from([0.0, 1.0, -1.0, 1e30, 1e300, math.nan, math.inf, -math.inf, 4.0])


@st.composite
def arrays(draw: Any, rank: int | None = None) -> Any:
    r = draw(st.integers(0, 4)) if rank is None else rank
    shape = tuple(draw(st.lists(st.integers(0, 4), min_size=r, max_size=r)))
    base = np.asarray(draw(st.lists(SPECIAL, min_size=1, max_size=4)), dtype=np.float64)
    a = np.resize(base, shape)
    dt = draw(DTYPES)
    if dt is object:
        return a.astype(object)
    with np.errstate(all="ignore"):
        return a.astype(dt)


@settings(suppress_health_check=SUPPRESS)
@given(k=st.integers(0, 11), x=arrays(), build_rank_ok=st.booleans(), training=st.booleans(),
       grad=arrays())
def test_forward_backward_raise_only_typed_errors(k: int, x: Any, build_rank_ok: bool, training: bool,
                                                  grad: Any) -> None:
    make, rank = _layers()[k]
    layer = make()
    shape = (None, *([3] * (rank - 1))) if build_rank_ok else (None,) * (k % 3)
    if typed_only(lambda: layer.build(shape) or True) is None and not layer.built:
        return
    ctx = rk.Ctx.training(0) if training else rk.Ctx.inference()
    y = typed_only(lambda: layer.forward(x, ctx))
    if y is not None and training:
        typed_only(lambda: layer.backward(grad, ctx))
        typed_only(lambda: layer.backward(np.ones_like(y), ctx))


# -- fit / evaluate / predict ---------------------------------------------------------------------
def _model() -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(3, seed=0), rk.Dense(2, seed=1)], input_shape=(None, 4, 2))
    m.compile(rk.Adam(0.01), "mse")
    return m


MODEL = _model()
FIT_KW = st.dictionaries(st.sampled_from(["batch_size", "validation_split", "seed", "shuffle", "verbose",
                                          "initial_epoch", "callbacks", "validation_data"]), ODD,
                         max_size=2)


@settings(suppress_health_check=SUPPRESS, deadline=None)
@given(x=st.one_of(arrays(), arrays(rank=3)), y=st.one_of(arrays(), arrays(rank=2)), epochs=ODD,
       kw=FIT_KW, bs=ODD)
def test_fit_evaluate_predict_raise_only_typed_errors(x: Any, y: Any, epochs: Any, kw: dict[str, Any],
                                                      bs: Any) -> None:
    m = _model()
    typed_only(lambda: m.fit(x, y, epochs if isinstance(epochs, int) and epochs < 3 else 1, **kw))
    typed_only(lambda: MODEL.evaluate(x, y, batch_size=bs))
    typed_only(lambda: MODEL.predict(x, batch_size=bs))


# -- loaders --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def valid_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    d = tmp_path_factory.mktemp("valid")
    m = _model()
    m.save(str(d / "model.safetensors"))
    m.save_weights(str(d / "weights.safetensors"))
    rio.save_torch_safetensors(rk.rnn.lstm(2, 3), d / "torch.safetensors")
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("config.json", '{"class_name": "Sequential", "config": {"layers": []}}')
        z.writestr("model.weights.h5", b"\x89HDF\r\n\x1a\n" + bytes(100))
    files = {k: (d / f"{k}.safetensors").read_bytes() for k in ("model", "weights", "torch")}
    return {**files, "keras": buf.getvalue()}


LOADERS: dict[str, Callable[[Path], Any]] = {
    "load_model": rk.load_model,
    "load_weights": lambda p: _model().load_weights(str(p)),
    "load_torch_safetensors": rk.load_torch_safetensors,
    "load_torch_rnn": rk.load_torch_rnn,
    "load_keras": rk.load_keras,
    "load_keras_weights": lambda p: rk.load_keras_weights(_model(), p),
    "read_safetensors": rio.read_safetensors,
}


@settings(suppress_health_check=SUPPRESS, deadline=None)
@given(loader=st.sampled_from(sorted(LOADERS)),
       source=st.sampled_from(["model", "weights", "torch", "keras"]), cut=st.floats(0.0, 1.0),
       flips=st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(0, 255)), max_size=4),
       junk=st.binary(max_size=64))
def test_loaders_raise_only_typed_errors(tmp_path_factory: pytest.TempPathFactory,
                                         valid_files: dict[str, bytes], loader: str, source: str, cut: float,
                                         flips: list[tuple[float, int]], junk: bytes) -> None:
    data = bytearray(valid_files[source])
    for where, byte in flips:  # damage bytes anywhere (header or data)
        if data:
            data[min(int(where * len(data)), len(data) - 1)] = byte
    data = data[: max(0, int(cut * len(data)) if cut < 0.9 else len(data))] + junk
    path = tmp_path_factory.mktemp("fuzz") / "f.bin"
    path.write_bytes(bytes(data))
    typed_only(lambda: LOADERS[loader](path))
