"""Weights of one recurrent layer to/from PyTorch (live torch.nn.RNN/LSTM/GRU) and Keras layouts."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.io import from_keras_weights, from_torch_state, to_keras_weights, to_torch_state

B, T, F, H = 3, 7, 4, 5
X = np.random.default_rng(2).standard_normal((B, T, F)).astype(np.float32)


def _torch_module(kind: str, **kw: Any) -> Any:
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    cls = {"SimpleRNN": torch.nn.RNN, "LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU}[kind]
    mod = cls(F, H, batch_first=True, **kw)
    with torch.no_grad():          # non-trivial biases on both sides, so the sum/split matters
        for p in mod.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return mod


def _ours(kind: str, **kw: Any) -> rk.RecurrentLayer:
    if kind == "GRU":
        return rk.GRU(H, reset_after=True, return_sequences=True, **kw)
    return getattr(rk, kind)(H, return_sequences=True, **kw)


def _torch_out(mod: Any, x: np.ndarray) -> np.ndarray:
    import torch

    with torch.no_grad():
        return mod(torch.from_numpy(x))[0].numpy()


CASES = [("SimpleRNN", {}, {}), ("SimpleRNN", {"nonlinearity": "relu"}, {"activation": "relu"}),
         ("LSTM", {}, {}), ("GRU", {}, {})]


@pytest.mark.parametrize(("kind", "tkw", "okw"), CASES, ids=["rnn_tanh", "rnn_relu", "lstm", "gru"])
def test_torch_state_dict_imports_to_the_same_outputs(kind: str, tkw: dict[str, Any],
                                                      okw: dict[str, Any]) -> None:
    mod = _torch_module(kind, **tkw)
    ours = _ours(kind, **okw)                  # unbuilt: built from weight_ih's width
    from_torch_state(ours, mod.state_dict())
    assert ours.input_dim == F
    expected = _torch_out(mod, X)
    np.testing.assert_allclose(ours.predict(X), expected, rtol=0, atol=1e-5)
    if kind == "LSTM":                          # bias_ih + bias_hh summed into one row
        sd = mod.state_dict()
        np.testing.assert_allclose(ours.weight("bias")[0], (sd["bias_ih_l0"] + sd["bias_hh_l0"]).numpy(),
                                   atol=1e-6)


@pytest.mark.parametrize(("kind", "tkw", "okw"), CASES, ids=["rnn_tanh", "rnn_relu", "lstm", "gru"])
def test_export_loads_into_torch_and_gives_our_outputs(kind: str, tkw: dict[str, Any],
                                                       okw: dict[str, Any]) -> None:
    pytest.importorskip("torch")

    ours = _ours(kind, seed=4, **okw)
    ours.build((None, T, F))
    # random biases so that the bias rows are exercised (the init leaves most at 0)
    b = np.random.default_rng(1).standard_normal(ours.weight("bias").shape) * 0.5
    ours.set_weight("bias", b)
    state = to_torch_state(ours)
    assert sorted(state) == ["bias_hh_l0", "bias_ih_l0", "weight_hh_l0", "weight_ih_l0"]
    mod = _torch_module(kind, **tkw)
    import torch

    mod.load_state_dict({k: torch.from_numpy(v) for k, v in state.items()})
    np.testing.assert_allclose(_torch_out(mod, X), ours.predict(X), rtol=0, atol=1e-5)
    # and back again: identical weights
    again = _ours(kind, **okw)
    from_torch_state(again, state)
    for n in ("kernel", "recurrent_kernel", "bias"):
        np.testing.assert_array_equal(again.weight(n), ours.weight(n))


def test_gru_block_order_is_swapped() -> None:
    mod = _torch_module("GRU")
    ours = _ours("GRU")
    from_torch_state(ours, mod.state_dict())
    w_ih = mod.state_dict()["weight_ih_l0"].numpy()       # [r | z | n] rows
    np.testing.assert_array_equal(ours.weight("kernel")[:, :H], w_ih[H:2 * H].T)     # z first here
    np.testing.assert_array_equal(ours.weight("kernel")[:, H:2 * H], w_ih[:H].T)     # then r


def test_torch_errors() -> None:
    mod = _torch_module("GRU")
    with pytest.raises(rk.InvalidParameterError, match="reset_after=True"):
        from_torch_state(rk.GRU(H), mod.state_dict())
    with pytest.raises(rk.InvalidParameterError, match="reset_after=True"):
        to_torch_state(rk.GRU(H, input_dim=F))
    with pytest.raises(rk.InvalidParameterError, match="relu"):
        from_torch_state(rk.LSTM(H, activation="relu"), _torch_module("LSTM").state_dict())
    sd = {k: v.numpy() for k, v in _torch_module("LSTM").state_dict().items()}
    del sd["weight_hh_l0"]
    sd["bias_ih_l0"] = sd["bias_ih_l0"][:3]
    with pytest.raises(rk.WeightShapeError, match=r"'weight_hh_l0': expected \(20, 5\), got missing; "
                                                   r"'bias_ih_l0': expected \(20,\), got \(3,\)"):
        from_torch_state(rk.LSTM(H), sd)
    with pytest.raises(rk.WeightShapeError, match="weight_ih_l1"):
        from_torch_state(rk.LSTM(H), sd, suffix="_l1")
    with pytest.raises(rk.WeightShapeError, match=r"'weight_ih_l0': expected \(20, 3\), got \(20, 4\)"):
        from_torch_state(rk.LSTM(H, input_dim=3), _torch_module("LSTM").state_dict())


def test_torch_state_without_biases_gives_a_zero_bias() -> None:
    mod = _torch_module("LSTM", bias=False)
    ours = _ours("LSTM")
    from_torch_state(ours, mod.state_dict())
    np.testing.assert_array_equal(ours.weight("bias"), np.zeros((1, 4 * H)))
    np.testing.assert_allclose(ours.predict(X), _torch_out(mod, X), atol=1e-5)


# -- Keras layout ----------------------------------------------------------------------------------
@pytest.mark.parametrize(("kind", "reset_after"), [("SimpleRNN", False), ("LSTM", False),
                                                    ("GRU", False), ("GRU", True)])
def test_keras_layout_round_trip(kind: str, reset_after: bool) -> None:
    kw = {"reset_after": reset_after} if kind == "GRU" else {}
    src = getattr(rk, kind)(H, seed=3, input_dim=F, **kw)
    src.set_weight("bias", np.random.default_rng(0).standard_normal(src.weight("bias").shape))
    ws = to_keras_weights(src)
    G = {"SimpleRNN": 1, "LSTM": 4, "GRU": 3}[kind]
    assert ws[0].shape == (F, G * H) and ws[1].shape == (H, G * H)
    assert ws[2].shape == ((2, 3 * H) if reset_after else (G * H,))
    dst = getattr(rk, kind)(H, **kw)
    from_keras_weights(dst, ws)
    assert dst.weight("bias").shape == ((2, 3 * H) if reset_after else (1, G * H))
    assert dst.predict(X).tobytes() == src.predict(X).tobytes()


def test_keras_bias_mismatch_and_no_bias() -> None:
    k, r = np.ones((F, 3 * H)), np.ones((H, 3 * H))
    with pytest.raises(rk.InvalidParameterError, match=r"\(2, 15\).*reset_after=True"):
        from_keras_weights(rk.GRU(H), [k, r, np.zeros((2, 3 * H))])
    with pytest.raises(rk.InvalidParameterError, match=r"\(15,\).*reset_after=False"):
        from_keras_weights(rk.GRU(H, reset_after=True), [k, r, np.zeros(3 * H)])
    g = rk.GRU(H)
    from_keras_weights(g, [k, r])
    np.testing.assert_array_equal(g.weight("bias"), np.zeros((1, 3 * H)))
    with pytest.raises(rk.WeightShapeError, match="kernel"):
        from_keras_weights(rk.LSTM(H), [k, r, np.zeros(3 * H)])
    with pytest.raises(rk.InvalidInputError, match="got 4 arrays"):
        from_keras_weights(rk.LSTM(H), [k, r, k, r])


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_live_keras_layer_imports() -> None:
    import os

    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    kl = keras.layers.LSTM(H, return_sequences=True)
    kl.build((None, T, F))
    rng = np.random.default_rng(8)
    kl.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.4 for w in kl.get_weights()])
    ours = rk.LSTM(H, return_sequences=True)
    from_keras_weights(ours, kl.get_weights())
    np.testing.assert_allclose(ours.predict(X), keras.ops.convert_to_numpy(kl(X)), atol=1e-5)
    kg = keras.layers.GRU(H, return_sequences=True)            # Keras' default reset_after=True
    kg.build((None, T, F))
    kg.set_weights([rng.standard_normal(w.shape).astype(np.float32) * 0.4 for w in kg.get_weights()])
    gru = rk.GRU(H, reset_after=True, return_sequences=True)
    from_keras_weights(gru, kg.get_weights())
    np.testing.assert_allclose(gru.predict(X), keras.ops.convert_to_numpy(kg(X)), atol=1e-5)
