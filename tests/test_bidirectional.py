"""Bidirectional: values against the two layers run by hand, the layer contract (float64
finite differences) in every merge mode, padded batches equal to each sequence alone (outputs
and gradients, both mask kinds), model files; graph nodes with several outputs and initial
states (the encoder learns from the decoder's loss)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import check_layer
from seq_helpers import model_gradcheck

RNG = np.random.default_rng(17)
B, T, F, H = 3, 5, 4, 3
KINDS = {"SimpleRNN": rk.SimpleRNN, "LSTM": rk.LSTM, "GRU": rk.GRU}


def _bi(kind: str, mode: Any, seq: bool = True, dtype: str = "float64") -> rk.Bidirectional:
    return rk.Bidirectional(KINDS[kind](H, return_sequences=seq, seed=3, dtype=dtype), mode)


def _merge(mode: Any, a: np.ndarray, b: np.ndarray) -> Any:
    return {"concat": lambda: np.concatenate([a, b], -1), "sum": lambda: a + b, "mul": lambda: a * b,
            "ave": lambda: (a + b) / 2, None: lambda: [a, b]}[mode]()


@pytest.mark.parametrize("seq", [True, False])
@pytest.mark.parametrize("mode", ["concat", "sum", "mul", "ave", None])
def test_values_are_the_two_layers_by_hand(mode: Any, seq: bool) -> None:
    bi = _bi("LSTM", mode, seq)
    x = RNG.standard_normal((B, T, F))
    bi.build((None, T, F))
    fwd = rk.LSTM(H, return_sequences=seq, dtype="float64")
    bwd = rk.LSTM(H, return_sequences=seq, dtype="float64")
    fwd.set_weights(*[bi.weight(f"forward.{n}") for n in ("kernel", "recurrent_kernel", "bias")])
    bwd.set_weights(*[bi.weight(f"backward.{n}") for n in ("kernel", "recurrent_kernel", "bias")])
    assert not np.array_equal(bi.weight("forward.kernel"), bi.weight("backward.kernel"))  # own weights
    yf = fwd.predict(x)
    yb = bwd.predict(x[:, ::-1])
    if seq:
        yb = yb[:, ::-1]                              # back into input order
    want = _merge(mode, yf, yb)
    got = bi.predict(x)
    for w, g in zip(want if mode is None else [want], got if mode is None else [got], strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
    assert bi.compute_output_shape((None, T, F)) is not None


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("mode", ["concat", "sum", "mul", "ave"])
def test_layer_contract_every_merge_mode(kind: str, mode: str) -> None:
    report = check_layer(lambda dtype: _bi(kind, mode, True, dtype),
                         lambda rng: rng.standard_normal((2, 4, 3)), threads=2)
    assert report is not None


@pytest.mark.parametrize("mode", [None, "concat"])
def test_merge_none_is_a_node_with_two_outputs_with_float64_gradients(mode: Any) -> None:
    b = rk.GraphBuilder()
    inp = b.input((None, T, F))
    bi = b.add(_bi("GRU", mode), inp)
    if mode is None:
        yf, yb = bi
        out = b.add(rk.Multiply(dtype="float64"), [yf, yb])
    else:
        out = bi
    model = b.build(out)
    x = RNG.standard_normal((2, T, F))
    errs = model_gradcheck(model, [x])
    assert max(errs.values()) < 1e-6, errs
    if mode is None:
        sub = _bi("GRU", "mul")
        sub.build((None, T, F))
        for n in sub.weight_names:
            sub.set_weight(n, model.called_layers[0].weight(n))
        np.testing.assert_allclose(model.predict(x), sub.predict(x), rtol=1e-12)


Run = tuple[np.ndarray, np.ndarray, dict[str, np.ndarray]]


def _run(layer: Any, x: np.ndarray, G: np.ndarray, mask: Any) -> Run:
    ctx = rk.Ctx.training()
    y = layer.forward(x, ctx.set_mask(mask))
    dx = layer.backward(G, ctx)
    return y, dx, {n: ctx.grad(layer, n) for n in layer.trainable_names}


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("seq", [True, False])
@pytest.mark.parametrize("mask_kind", ["lengths", "mask"])
def test_padded_batch_equals_each_sequence_alone(kind: str, seq: bool, mask_kind: str) -> None:
    lengths = np.array([5, 2, 3])
    bi = _bi(kind, "concat", seq)
    bi.build((None, None, F))
    x = RNG.standard_normal((B, T, F))
    valid = np.arange(T)[None, :] < lengths[:, None]
    x[~valid] = 99.0                                        # the padding must never be read
    mask = rk.Mask(lengths=lengths) if mask_kind == "lengths" else rk.Mask(valid)
    out_w = 2 * H
    G = RNG.standard_normal((B, T, out_w) if seq else (B, out_w))
    if seq:
        G[~valid] = 0.0
    y, dx, grads = _run(bi, x, G, mask)
    total = {n: np.zeros_like(g) for n, g in grads.items()}
    for i, n in enumerate(lengths):
        Gi = G[i:i + 1, :n] if seq else G[i:i + 1]
        yi, dxi, gi = _run(bi, x[i:i + 1, :n], Gi, None)
        np.testing.assert_allclose(y[i, :n] if seq else y[i], yi[0], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(dx[i, :n], dxi[0], rtol=1e-9, atol=1e-12)
        for k in total:
            total[k] += gi[k]
        if seq:
            assert np.all(y[i, n:] == 0.0)                  # padded steps: zeros (Keras, PyTorch)
        assert np.all(dx[i, n:] == 0.0)
    for k in total:
        np.testing.assert_allclose(grads[k], total[k], rtol=1e-9, atol=1e-12)


def test_masked_bidirectional_model_float64_gradients() -> None:
    b = rk.GraphBuilder()
    inp = b.input((None, T, F))
    h = b.add(_bi("LSTM", "ave"), inp)
    out = b.add(rk.Dense(2, dtype="float64", seed=1), h)
    model = b.build(out)
    x = RNG.standard_normal((B, T, F))
    errs = model_gradcheck(model, [x], masks=[rk.Mask(lengths=np.array([4, 1, 5]))])
    assert max(errs.values()) < 1e-6, errs
    assert model._forward_masks([x], rk.Ctx.inference(), False,
                                [rk.Mask(lengths=np.array([4, 1, 5]))])[1][0].ends(T).tolist() == [4, 1, 5]


def test_saved_and_loaded_with_weights_by_name(tmp_path: Path) -> None:
    model = rk.Sequential([rk.Masking(), rk.Bidirectional(rk.GRU(H, return_sequences=True, seed=2), "sum"),
                           rk.Bidirectional(rk.LSTM(2, seed=5), "concat", name="top"), rk.Dense(1)],
                          input_shape=(None, T, F))
    assert "1.forward.kernel" in model.named_weights() and "2.backward.bias" in model.named_weights()
    x = RNG.standard_normal((B, T, F)).astype(np.float32)
    x[1, 3:] = 0.0
    model.save(str(tmp_path / "bi.rnnkit"))
    again = rk.load_model(str(tmp_path / "bi.rnnkit"))
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    text = model.summary(print_fn=None)
    assert "Bidirectional" in text and f"{model.param_count():,}" in text
    model.compile("sgd", "mse")
    before = model.get_weights()
    model.fit(x, np.ones((B, 1), np.float32), 1)
    assert all(not np.array_equal(a, b) for a, b in zip(before, model.get_weights(), strict=True))


def test_refuses_what_it_cannot_do() -> None:
    with pytest.raises(TypeError, match="recurrent layer"):
        rk.Bidirectional(rk.Dense(2))
    with pytest.raises(rk.InvalidParameterError, match="merge_mode"):
        rk.Bidirectional(rk.LSTM(2), "max")
    with pytest.raises(rk.InvalidParameterError, match="other way"):
        rk.Bidirectional(rk.LSTM(2), backward_layer=rk.LSTM(2))
    with pytest.raises(rk.InvalidParameterError, match="return_sequences"):
        rk.Bidirectional(rk.LSTM(2), backward_layer=rk.LSTM(2, go_backwards=True, return_sequences=True))


# -- graph nodes: several outputs, initial states ----------------------------------------------
def _encoder_decoder(kind: str) -> rk.GraphModel:
    b = rk.GraphBuilder()
    enc_in = b.input((None, 4, 3), name="enc_in")
    dec_in = b.input((None, 5, 2), name="dec_in")
    enc = b.add(KINDS[kind](4, return_state=True, seed=1, dtype="float64"), enc_in, name="encoder")
    states = list(enc)[1:]
    dec = b.add(KINDS[kind](4, return_sequences=True, seed=2, dtype="float64"), [dec_in, *states],
                name="decoder")
    return b.build(b.add(rk.Dense(2, seed=3, dtype="float64"), dec))


@pytest.mark.parametrize("kind", list(KINDS))
def test_encoder_decoder_gradients_reach_the_encoder(kind: str) -> None:
    model = _encoder_decoder(kind)
    xs = [RNG.standard_normal((2, 4, 3)), RNG.standard_normal((2, 5, 2))]
    errs = model_gradcheck(model, xs)
    assert max(errs.values()) < 1e-6, errs
    ctx = rk.Ctx.training()
    model.forward(xs, ctx)
    model.backward(np.ones((2, 5, 2)), ctx)
    assert np.abs(ctx.grad(model.called_layers[0], "kernel")).max() > 1e-3     # the encoder learns


def test_state_nodes_index_save_and_refuse(tmp_path: Path) -> None:
    model = _encoder_decoder("LSTM")
    b = rk.GraphBuilder()
    enc = b.add(rk.LSTM(4, return_state=True), b.input((None, 4, 3)))
    assert enc[1] is enc[1] and enc[-1] is enc[2] and len(enc) == 3 and enc[1] and enc
    with pytest.raises(TypeError, match="one output"):
        len(enc[1])
    with pytest.raises(IndexError):
        enc[3]
    with pytest.raises(rk.InvalidInputError, match="outputs"):
        b.add(rk.Dense(2), enc)
    with pytest.raises(rk.InvalidInputError, match="several outputs"):
        b.build(enc)
    with pytest.raises(rk.InvalidInputError, match="initial state"):
        b.add(rk.LSTM(4), [b.input((None, 2, 2)), enc[1]])
    with pytest.raises(rk.InvalidInputError, match="GraphBuilder"):
        rk.Sequential([rk.LSTM(2, return_state=True)], input_shape=(None, 3, 2))
    xs = [RNG.standard_normal((2, 4, 3)), RNG.standard_normal((2, 5, 2))]
    model.save(str(tmp_path / "ed.rnnkit"))
    again = rk.load_model(str(tmp_path / "ed.rnnkit"))
    np.testing.assert_array_equal(again.predict(xs), model.predict(xs))
    assert "encoder[1]" in model.summary(print_fn=None)


def test_rnnnet_states_in_a_graph_model() -> None:
    """PyTorch-layout states (num_layers * D, batch, width) pass between RNNNet nodes."""
    b = rk.GraphBuilder()
    src, tgt = b.input((None, 4, 3)), b.input((None, 5, 3))
    enc = b.add(rk.rnn.gru(3, 4, rk.rnn.RNNConfig(batch_first=True, num_layers=2), seed=1,
                           dtype="float64", return_state=True), src)
    dec = b.add(rk.rnn.gru(3, 4, rk.rnn.RNNConfig(batch_first=True, num_layers=2), seed=2,
                           dtype="float64"), [tgt, enc[1]])
    model = b.build(dec)
    assert enc.shape[1].dims == (2, None, 4)
    errs = model_gradcheck(model, [RNG.standard_normal((2, 4, 3)), RNG.standard_normal((2, 5, 3))])
    assert max(errs.values()) < 1e-6, errs


@pytest.mark.parametrize("mode", ["concat", None])
def test_bidirectional_states_out_and_in_with_float64_gradients(mode: Any) -> None:
    """A bidirectional encoder's four LSTM states start a bidirectional decoder."""
    b = rk.GraphBuilder()
    src, tgt = b.input((None, 4, 3)), b.input((None, 5, 2))
    enc = b.add(rk.Bidirectional(rk.LSTM(3, return_state=True, seed=1, dtype="float64"), mode), src)
    n_main = 2 if mode is None else 1
    assert len(enc) == n_main + 4
    states = list(enc)[n_main:]
    dec = b.add(rk.Bidirectional(rk.LSTM(3, return_sequences=True, seed=4, dtype="float64"), "sum"),
                [tgt, *states])
    model = b.build([dec, enc[0]])
    xs = [RNG.standard_normal((2, 4, 3)), RNG.standard_normal((2, 5, 2))]
    errs = model_gradcheck(model, xs)
    assert max(errs.values()) < 1e-6, errs
    bi = model.called_layers[0]
    ctx = rk.Ctx.inference()
    out = bi.forward(xs[0], ctx)
    fwd_h = rk.LSTM(3, dtype="float64")
    fwd_h.set_weights(*[bi.weight(f"forward.{n}") for n in ("kernel", "recurrent_kernel", "bias")])
    np.testing.assert_allclose(out[n_main], fwd_h.predict(xs[0]), rtol=1e-12)   # forward h


@pytest.mark.parametrize("make", [lambda: rk.RecurrentLayer(rk.GRUCell(H), return_sequences=True, seed=5,
                                                            dtype="float64"),
                                  lambda: rk.RNN(rk.LSTMCell(H), return_sequences=True, seed=5,
                                                 dtype="float64")],
                         ids=["RecurrentLayer(GRUCell)", "RNN(LSTMCell)"])
def test_any_recurrent_layer_is_copied_by_its_config(make: Any) -> None:
    """The backward branch of ``Bidirectional(layer)`` is ``layer``'s class rebuilt from its
    registry config: the outputs are the two directions run by hand with the same weights."""
    layer = make()
    bi = rk.Bidirectional(layer)
    x = RNG.standard_normal((B, T, F))
    bi.build((None, T, F))
    assert type(bi.backward_layer) is not rk.Bidirectional and bi.backward_layer.go_backwards
    names = layer.weight_names
    fwd, bwd = make(), make()
    fwd.build((None, T, F))
    bwd.build((None, T, F))
    fwd.set_weights(*[bi.weight(f"forward.{n}") for n in names])
    bwd.set_weights(*[bi.weight(f"backward.{n}") for n in names])
    assert not np.array_equal(bi.weight("forward.kernel"), bi.weight("backward.kernel"))  # own weights
    want = np.concatenate([fwd.predict(x), bwd.predict(x[:, ::-1])[:, ::-1]], -1)
    np.testing.assert_allclose(bi.predict(x), want, rtol=1e-12, atol=1e-12)   # same float64 arithmetic
