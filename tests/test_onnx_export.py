"""ONNX export (``rk.save_onnx``): onnxruntime's outputs equal rnnkit's (<= 1e-5, float32) at
two batch sizes and two sequence lengths other than any used at export; each refusal."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from seq_helpers import randomise

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
ort.set_default_logger_severity(3)

TOL = 1e-5
SIZES = [(2, 5), (5, 9)]   # (batch, time): neither is fixed by the export



def run(path: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def export(model: Any, tmp_path: Path, **kw: Any) -> Path:
    path = tmp_path / "m.onnx"
    rk.save_onnx(model, path, **kw)
    onnx.checker.check_model(onnx.load(str(path)), full_check=True)
    return path


CELLS = [("SimpleRNN", {}), ("SimpleRNN", {"activation": "relu"}), ("LSTM", {}),
         ("LSTM", {"recurrent_activation": "hard_sigmoid"}), ("GRU", {}), ("GRU", {"reset_after": True}),
         ("GRU", {"reset_after": True, "activation": "linear"})]


@pytest.mark.parametrize("cell,kw", CELLS, ids=[c + "".join(f"-{v}" for v in k.values()) for c, k in CELLS])
def test_each_cell_direction_sequences_and_bias(cell: str, kw: dict[str, Any], tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    for go_backwards, seqs, bias in itertools.product([False, True], repeat=3):
        layer = getattr(rk, cell)(5, go_backwards=go_backwards, return_sequences=seqs, use_bias=bias, **kw)
        model = rk.Sequential([layer], input_shape=(None, None, 3))
        randomise(model.layers)
        path = export(model, tmp_path)
        for B, T in SIZES:
            x = rng.normal(size=(B, T, 3)).astype(np.float32)
            got, want = run(path, {"input": x})[0], model.predict(x)
            assert got.shape == want.shape
            np.testing.assert_allclose(got, want, atol=TOL, rtol=0,
                                       err_msg=f"go_backwards={go_backwards} seqs={seqs} bias={bias}")


@pytest.mark.parametrize("cell", ["SimpleRNN", "LSTM", "GRU"])
def test_lengths_become_sequence_lens(cell: str, tmp_path: Path) -> None:
    """PyTorch's packed semantics: outputs past each length zero, final state at its end;
    go_backwards reverses each sequence within its own length."""
    rng = np.random.default_rng(2)
    for go_backwards, seqs in itertools.product([False, True], repeat=2):
        model = rk.Sequential([getattr(rk, cell)(4, go_backwards=go_backwards, return_sequences=seqs),
                               rk.Dense(2)], input_shape=(None, None, 3))
        randomise(model.layers, 3)
        path = export(model, tmp_path, lengths=True)
        for B, T in SIZES:
            x = rng.normal(size=(B, T, 3)).astype(np.float32)
            n = rng.integers(1, T + 1, B)
            n[0] = T
            want = model.forward(x, rk.Ctx.inference().set_mask(lengths=n))
            got = run(path, {"input": x, "lengths": n.astype(np.int64)})[0]
            np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn"])
def test_rnn_net_stacks_directions_and_states(mode: str, tmp_path: Path) -> None:
    """An RNNNet (2 layers, bidirectional, both batch layouts) with h_0 / c_0 as graph inputs
    and h_n / c_n as outputs."""
    rng = np.random.default_rng(4)
    for bidirectional, batch_first in itertools.product([False, True], repeat=2):
        cfg = rk.rnn.RNNConfig(num_layers=2, bidirectional=bidirectional, batch_first=batch_first)
        net = getattr(rk.rnn, mode)(3, 4, cfg, seed=1)
        randomise([net], 5)
        net.return_state = True
        path = export(net, tmp_path, initial_state=True)
        for B, T in SIZES:
            x = rng.normal(size=(B, T, 3) if batch_first else (T, B, 3)).astype(np.float32)
            st = net.zero_state(B)
            st = type(st)(*(rng.normal(size=p.shape).astype(np.float32) for p in st))
            out, final = net.seq_init(x, st)
            feeds = {"input": x, **{f"initial_{k}": v for k, v in zip(("h", "c"), st, strict=False)}}
            got = run(path, feeds)
            assert len(got) == 1 + len(final)
            for g, w in zip(got, [out, *final], strict=True):
                np.testing.assert_allclose(g, w, atol=TOL, rtol=0)


def test_embedding_bidirectional_dense_classifier(tmp_path: Path) -> None:
    """Embedding -> Bidirectional LSTM (as load_keras builds it: forward, backward, Reverse,
    Concatenate) -> Dropout -> Dense(softmax); int64 token ids in."""
    b = rk.GraphBuilder("clf")
    tok = b.input((None, None), name="tokens")
    e = b.add(rk.Embedding(20, 6), tok)
    fwd = b.add(rk.LSTM(5, return_sequences=True), e, name="bi__forward")
    bwd = b.add(rk.LSTM(5, return_sequences=True, go_backwards=True), e, name="bi__backward")
    bwd = b.add(rk.Reverse(1), bwd)
    h = b.add(rk.Concatenate(-1), [fwd, bwd])
    h = b.add(rk.GRU(4, reset_after=True), h)
    h = b.add(rk.Dropout(0.5), h)
    model = b.build(b.add(rk.Dense(3, activation="softmax"), h))
    randomise(model.layers, 6)
    path = export(model, tmp_path)
    rng = np.random.default_rng(7)
    for B, T in SIZES:
        ids = rng.integers(0, 20, (B, T))
        got = run(path, {"tokens": ids.astype(np.int64)})[0]
        np.testing.assert_allclose(got, model.predict(ids.astype(np.float32)), atol=TOL, rtol=0)


def test_encoder_decoder(tmp_path: Path) -> None:
    """An encoder LSTM's state repeated into a decoder GRU, a per-step Dense and activations,
    as a Sequential; and a decoder started from a state the graph is given (initial_state)."""
    model = rk.Sequential([rk.LSTM(6), rk.RepeatVector(4), rk.GRU(5, return_sequences=True),
                           rk.Dense(3), rk.ActivationLayer("hard_sigmoid")], input_shape=(None, None, 2))
    randomise(model.layers, 8)
    path = export(model, tmp_path)
    rng = np.random.default_rng(9)
    for B, T in SIZES:
        x = rng.normal(size=(B, T, 2)).astype(np.float32)
        np.testing.assert_allclose(run(path, {"input": x})[0], model.predict(x), atol=TOL, rtol=0)
    dec = rk.LSTM(5, return_sequences=True, return_state=True)
    dec.build(rk.Shape((None, None, 3)))
    randomise([dec], 10)
    path = export(dec, tmp_path, initial_state=True)
    for B, T in SIZES:
        x = rng.normal(size=(B, T, 3)).astype(np.float32)
        h0, c0 = (rng.normal(size=(B, 5)).astype(np.float32) for _ in range(2))
        want = dec.forward([x, h0, c0], rk.Ctx.inference())
        got = run(path, {"input": x, "initial_h": h0, "initial_c": c0})
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, atol=TOL, rtol=0)


def input_dims(path: Path) -> list[Any]:
    shape = onnx.load(str(path)).graph.input[0].type.tensor_type.shape
    return [d.dim_param or d.dim_value for d in shape.dim]


def test_fixed_axes_and_opset(tmp_path: Path) -> None:
    model = rk.Sequential([rk.GRU(3)], input_shape=(None, 6, 2))
    randomise(model.layers)
    path = export(model, tmp_path, dynamic_batch=4, dynamic_time=6, opset=14)
    assert onnx.load(str(path)).opset_import[0].version == 14
    assert input_dims(path) == [4, 6, 2]
    x = np.random.default_rng(0).normal(size=(4, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(run(path, {"input": x})[0], model.predict(x), atol=TOL, rtol=0)
    free = export(model, tmp_path)              # built for 6 steps; the graph runs any length
    assert input_dims(free) == ["batch", "time", 2]
    x9 = np.random.default_rng(1).normal(size=(3, 9, 2)).astype(np.float32)
    unfixed = rk.Sequential([rk.GRU(3)], input_shape=(None, None, 2))
    unfixed.set_weights(model.get_weights())
    np.testing.assert_allclose(run(free, {"input": x9})[0], unfixed.predict(x9), atol=TOL, rtol=0)
    fixed = export(model, tmp_path, dynamic_time=False)
    assert input_dims(fixed) == ["batch", 6, 2]
    with pytest.raises(rk.InvalidParameterError, match="dynamic_batch=False needs a batch size"):
        rk.save_onnx(model, tmp_path / "x.onnx", dynamic_batch=False)
    with pytest.raises(rk.InvalidParameterError, match=r"opset must be an int in \[14, "):
        rk.save_onnx(model, tmp_path / "x.onnx", opset=9)


# -- refusals ------------------------------------------------------------------------------------
class TinyCell(rk.Cell):
    name = "TinyCell"

    def params(self, input_dim: int) -> list[rk.Param]:
        return [rk.Param("V", (input_dim, self.units), lambda rng, s, dt: rng.uniform(-1, 1, s).astype(dt))]

    def step(self, w: Any, inp: np.ndarray, prev: Any, park: Any) -> Any:
        return (np.tanh(inp @ w["V"] + prev[0]),)

    def step_back(self, *a: Any) -> Any:   # never trained here
        raise NotImplementedError


def refused(model: Any, tmp_path: Path, match: str, **kw: Any) -> rk.UnsupportedFeatureError:
    path = tmp_path / "refused.onnx"
    with pytest.raises(rk.UnsupportedFeatureError, match=match) as err:
        rk.save_onnx(model, path, **kw)
    assert not path.exists()
    return err.value


def test_refusals_name_what_onnx_cannot_express(tmp_path: Path) -> None:
    shape = (None, None, 3)
    e = refused(rk.Sequential([rk.LSTM(4, proj_size=2, name="proj")], input_shape=shape), tmp_path,
                "ONNX's LSTM has no projection; this LSTM has proj_size=2")
    assert (e.layer, e.option) == ("proj", "proj_size")
    refused(rk.Sequential([rk.RecurrentLayer(TinyCell(4), name="tiny")], input_shape=shape), tmp_path,
            r"layer 'tiny': cell: a custom cell \(TinyCell\) has no ONNX operator")
    refused(rk.Sequential([rk.SimpleRNN(4, "softmax", name="soft")], input_shape=shape), tmp_path,
            "this SimpleRNN has 'softmax', which it cannot express")
    refused(rk.Sequential([rk.GRU(4, stateful=True, name="st")], input_shape=shape), tmp_path,
            "layer 'st': stateful: a stateful layer carries its state")
    net = rk.rnn.lstm(3, 4, rk.rnn.RNNConfig(proj_size=2))
    refused(net, tmp_path, "proj_size=2")


def test_lengths_only_where_they_describe_the_sequence(tmp_path: Path) -> None:
    """A decoder reading a RepeatVector's sequence, or a padded sequence reversed (padding
    first), is not what the lengths describe: refused rather than guessed."""
    enc_dec = rk.Sequential([rk.LSTM(3), rk.RepeatVector(4), rk.GRU(2, name="dec")],
                            input_shape=(None, None, 2))
    e = refused(enc_dec, tmp_path, "this layer reads a sequence the lengths do not describe", lengths=True)
    assert (e.layer, e.option) == ("dec", "lengths")
    rev = rk.Sequential([rk.Reverse(1, name="rev"), rk.GRU(2)], input_shape=(None, None, 2))
    refused(rev, tmp_path, "layer 'rev': lengths: reversing a padded sequence puts its padding first",
            lengths=True)
    b = rk.GraphBuilder()
    x_in = b.input((None, None, 2))
    joined = b.add(rk.Concatenate(1, name="join"), [x_in, b.add(rk.GRU(2, return_sequences=True), x_in)])
    refused(b.build(b.add(rk.LSTM(2), joined)), tmp_path, "layer 'join': lengths: joining padded sequences",
            lengths=True)
    path = export(enc_dec, tmp_path)            # without lengths it exports
    x = np.random.default_rng(15).normal(size=(3, 5, 2)).astype(np.float32)
    np.testing.assert_allclose(run(path, {"input": x})[0], enc_dec.predict(x), atol=TOL, rtol=0)


def test_keras_masking_is_refused(tmp_path: Path) -> None:
    """A layer producing Keras' boolean mask (repeat the previous output) has no exact graph."""
    class Masking(rk.Dropout):   # stands for the Masking layer by its class name
        pass

    refused(rk.Sequential([Masking(0.0, name="mask"), rk.LSTM(3)], input_shape=(None, None, 2)), tmp_path,
            "Keras masking repeats the previous output at a masked step")


def test_an_unknown_layer_and_a_missing_onnx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    class Twice(rk.Layer):
        def _build(self, shape: Any, rng: Any) -> None:
            pass

        def compute_output_shape(self, shape: Any) -> rk.Shape:
            return rk.Shape.of(shape)

        def forward(self, x: Any, ctx: Any) -> Any:
            return 2 * np.asarray(x)

    model = rk.Sequential([rk.GRU(2, return_sequences=True), Twice(name="twice")],
                          input_shape=(None, None, 2))
    refused(model, tmp_path, "layer 'twice': Twice: no ONNX export for layer class 'Twice'")
    with pytest.raises(rk.InvalidInputError, match="expected a Sequential, a GraphModel"):
        rk.save_onnx(object(), tmp_path / "x.onnx")
    import builtins

    real = builtins.__import__

    def no_onnx(name: str, *a: Any, **k: Any) -> Any:
        if name == "onnx" or name.startswith("onnx."):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_onnx)
    with pytest.raises(rk.MissingDependencyError, match=r"pip install rnnkit\[onnx\]"):
        rk.save_onnx(model, tmp_path / "x.onnx")


def test_model_save_with_an_onnx_name_writes_onnx(tmp_path: Path) -> None:
    model = rk.Sequential([rk.LSTM(3, return_sequences=True), rk.Dense(2)], input_shape=(None, None, 2))
    randomise(model.layers, 11)
    model.save(str(tmp_path / "m.onnx"))
    x = np.random.default_rng(12).normal(size=(3, 6, 2)).astype(np.float32)
    np.testing.assert_allclose(run(tmp_path / "m.onnx", {"input": x})[0], model.predict(x), atol=TOL, rtol=0)
    bad = rk.Sequential([rk.LSTM(4, proj_size=2)], input_shape=(None, None, 2))
    with pytest.raises(rk.UnsupportedFeatureError, match="proj_size"):
        bad.save(str(tmp_path / "p.onnx"))
    assert not (tmp_path / "p.onnx").exists()


@pytest.mark.parametrize("mode", ["lstm", "gru", "rnn"])
def test_rnn_net_in_a_model_with_lengths(mode: str, tmp_path: Path) -> None:
    """A bidirectional 2-layer RNNNet in a Sequential, padded batches: ONNX's bidirectional op
    reverses each sequence within its length, as the net's reverse direction does."""
    cfg = rk.rnn.RNNConfig(num_layers=2, bidirectional=True, batch_first=True)
    net = getattr(rk.rnn, mode)(3, 4, cfg, seed=1)
    model = rk.Sequential([net, rk.Dense(2)], input_shape=(None, None, 3))
    randomise(model.layers, 13)
    path = export(model, tmp_path, lengths=True)
    rng = np.random.default_rng(14)
    for B, T in SIZES:
        x = rng.normal(size=(B, T, 3)).astype(np.float32)
        n = rng.integers(1, T + 1, B)
        want = model.forward(x, rk.Ctx.inference().set_mask(lengths=n))
        got = run(path, {"input": x, "lengths": n.astype(np.int64)})[0]
        np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


def test_embedding_after_a_float_input_truncates_ids(tmp_path: Path) -> None:
    """An input read by an Embedding and by another layer stays float; the ids truncate toward
    zero as rnnkit's Embedding truncates them."""
    b = rk.GraphBuilder()
    ids = b.input((None, 4), name="ids")
    e = b.add(rk.Embedding(6, 3), ids)
    d = b.add(rk.Dense(3), ids)
    model = b.build([e, d])
    randomise(model.layers, 16)
    path = export(model, tmp_path)
    x = np.array([[0.0, 1.9, 5.5, 2.2], [4.99, 3.0, 0.4, 1.0]], np.float32)
    got = run(path, {"ids": x})
    for g_, w in zip(got, model.predict(x), strict=True):
        np.testing.assert_allclose(g_, w, atol=TOL, rtol=0)
