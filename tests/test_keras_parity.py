"""Keras 3 (torch backend) as an oracle: a Keras SimpleRNN / LSTM / GRU loads into rnnkit's fused
layout unchanged (kernel and recurrent_kernel as they are; bias reshaped to (1, G*H), or kept
(2, 3H) for reset_after=True) and gives Keras' outputs.

Also pins what Keras does with go_backwards + return_sequences on this backend: some documentation
says Keras flips the sequence back into input order; Keras 3.15.1 on torch returns processing order,
as rnnkit does.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import rnnkit as rk

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":  # pragma: no cover - another backend was forced
    pytest.skip("these parity tests pin Keras on its torch backend", allow_module_level=True)

B, T, F, H = 3, 7, 4, 5


def _keras_layer(kind: str, **kw: object) -> object:
    common = {"units": H, "return_sequences": kw.pop("return_sequences", False),
              "go_backwards": kw.pop("go_backwards", False)}
    if kind == "SimpleRNN":
        return keras.layers.SimpleRNN(**common, **kw)
    if kind == "LSTM":
        return keras.layers.LSTM(**common, unit_forget_bias=True, **kw)
    return keras.layers.GRU(**common, **kw)


def _ours(kind: str, reset_after: bool, **kw: object) -> rk.RecurrentLayer:
    if kind == "SimpleRNN":
        return rk.SimpleRNN(H, **kw)  # type: ignore[arg-type]
    if kind == "LSTM":
        return rk.LSTM(H, **kw)  # type: ignore[arg-type]
    return rk.GRU(H, reset_after=reset_after, **kw)  # type: ignore[arg-type]


CASES = [("SimpleRNN", False), ("LSTM", False), ("GRU", False), ("GRU", True)]


@pytest.mark.parametrize(("kind", "reset_after"), CASES)
@pytest.mark.parametrize("return_sequences", [False, True])
def test_keras_weights_load_unchanged_and_outputs_match(kind: str, reset_after: bool,
                                                        return_sequences: bool) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    kw = {"reset_after": reset_after} if kind == "GRU" else {}
    k = _keras_layer(kind, return_sequences=return_sequences, **kw)
    k.build((None, T, F))
    # random, non-trivial weights (Keras' own init leaves biases at 0)
    k.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.4 for w in k.get_weights()])
    kernel, rec, bias = k.get_weights()
    ours = _ours(kind, reset_after, return_sequences=return_sequences)
    bias_ours = bias if bias.ndim == 2 else bias.reshape(1, -1)
    ours.set_weights(kernel, rec, bias_ours)
    want = np.asarray(k(x).detach().cpu().numpy())
    got = ours.predict(x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=2e-6)


@pytest.mark.parametrize(("kind", "reset_after"), CASES)
def test_go_backwards_sequences_processing_order_against_keras(kind: str, reset_after: bool) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((B, T, F)).astype(np.float32)
    kw = {"reset_after": reset_after} if kind == "GRU" else {}
    k = _keras_layer(kind, return_sequences=True, go_backwards=True, **kw)
    k.build((None, T, F))
    k.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.4 for w in k.get_weights()])
    kernel, rec, bias = k.get_weights()
    ours = _ours(kind, reset_after, return_sequences=True, go_backwards=True)
    ours.set_weights(kernel, rec, bias if bias.ndim == 2 else bias.reshape(1, -1))
    keras_out = np.asarray(k(x).detach().cpu().numpy())
    got = ours.predict(x)
    # Keras 3.15.1 on torch returns processing order too (measured): slot 0 holds the state after
    # reading input step T-1, exactly rnnkit's contract. Not the reversal ascribed to Keras elsewhere.
    np.testing.assert_allclose(got, keras_out, atol=2e-6)
    assert np.abs(got[:, ::-1] - keras_out).max() > 1e-3
    # and the final slot is the state after consuming input step 0
    last = ours.with_return_sequences(False).predict(x)
    np.testing.assert_allclose(got[:, -1], last, atol=1e-7)
