"""Weight tying: ``Dense(V, tie_to=embedding)`` reads the embedding table transposed. The table's
gradient (both uses summed) against float64 finite differences of a loss written here, training
against PyTorch's tied word language model (``decoder.weight = encoder.weight``) over 20 Adam
steps, and the table saved and loaded once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._errors import InvalidInputError, InvalidParameterError

V, D, B, T, STEPS = 7, 3, 4, 5, 20


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(4)
    return rng.integers(0, V, (B, T)).astype(np.float64), rng.integers(0, V, (B, T)).astype(np.float64)


def _xent(logits: np.ndarray, labels: np.ndarray) -> float:
    """Mean softmax cross-entropy over every (sample, step), written out."""
    z = logits - logits.max(axis=-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(axis=-1, keepdims=True))
    picked = np.take_along_axis(logp, labels.astype(int)[..., None], axis=-1)
    return float(-picked.mean())


def _tied(seed: int = 0, rnn: bool = False) -> tuple[rk.Sequential, rk.layers.Embedding, rk.Dense]:
    emb = rk.layers.Embedding(V, D, dtype="float64", seed=seed)
    dense = rk.Dense(V, tie_to=emb, dtype="float64", seed=seed)
    mid: list[Any] = [rk.LSTM(D, return_sequences=True, bias_layout="torch", dtype="float64")] if rnn else []
    model = rk.Sequential([emb, *mid, dense], input_shape=(None, T))
    return model, emb, dense


def test_the_table_gradient_sums_both_uses_against_finite_differences() -> None:
    model, emb, dense = _tied()
    rng = np.random.default_rng(1)
    dense.set_weights(None, rng.standard_normal(V))
    x, y = _data()
    E0 = np.array(emb.weight("embeddings"))
    b0 = np.array(dense.weight("bias"))
    model.compile(rk.SGD(1.0), rk.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(x, y, epochs=1, shuffle=False)            # one step at lr 1: the change is -gradient
    grad = E0 - emb.weight("embeddings")
    assert "kernel" not in dense.weight_names and model.param_count() == V * D + V
    # the loss as a function of the table: the lookup and the output layer both read it
    def loss(E: np.ndarray, out: np.ndarray | None = None) -> float:
        return _xent(E[x.astype(int)] @ (E if out is None else out).T + b0, y)

    fd = np.zeros_like(E0)
    fd_lookup = np.zeros_like(E0)   # the table read by the lookup only
    for i in range(V):
        for j in range(D):
            d = np.zeros_like(E0)
            d[i, j] = 1e-6
            fd[i, j] = (loss(E0 + d) - loss(E0 - d)) / 2e-6
            fd_lookup[i, j] = (loss(E0 + d, E0) - loss(E0 - d, E0)) / 2e-6
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)
    assert np.max(np.abs(fd - fd_lookup)) > 1e-3   # the Dense's part is in it


def test_training_equals_torch_tied_word_language_model() -> None:
    torch = pytest.importorskip("torch")
    model, emb, dense = _tied(rnn=True)
    torch.manual_seed(0)
    enc = torch.nn.Embedding(V, D).double()
    lstm = torch.nn.LSTM(D, D, batch_first=True).double()
    dec = torch.nn.Linear(D, V).double()
    dec.weight = enc.weight                              # torch's --tied
    emb.set_weights(enc.weight.detach().numpy().copy())
    rk.io.from_torch_state(model.layers[1], lstm.state_dict())
    dense.set_weights(None, dec.bias.detach().numpy().copy())
    model.compile(rk.Adam(0.05, epsilon=1e-8), rk.losses.SparseCategoricalCrossentropy(from_logits=True))
    x, y = _data()
    ours = model.fit(x, y, epochs=STEPS, shuffle=False).history["loss"]
    params = list({id(p): p for m in (enc, lstm, dec) for p in m.parameters()}.values())
    assert len(params) == 1 + 4 + 1   # the shared table counted once
    opt = torch.optim.Adam(params, lr=0.05, eps=1e-8)
    tx, ty = torch.tensor(x, dtype=torch.long), torch.tensor(y, dtype=torch.long)
    theirs = []
    for _ in range(STEPS):
        opt.zero_grad()
        logits = dec(lstm(enc(tx))[0])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V), ty.reshape(-1))
        loss.backward()
        opt.step()
        theirs.append(float(loss))
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(emb.weight("embeddings"), enc.weight.detach().numpy(), rtol=1e-9, atol=1e-11)


def test_saved_and_loaded_once(tmp_path: Path) -> None:
    model, emb, dense = _tied(seed=3)
    x, _ = _data()
    path = tmp_path / "tied.rnnkit"
    rk.save_model(model, str(path))
    again = rk.load_model(str(path))
    assert list(again.named_weights()) == list(model.named_weights())
    assert again.layers[-1].tie_to is again.layers[0]
    np.testing.assert_array_equal(again.predict(x), model.predict(x))
    again.layers[0].set_weights(np.zeros((V, D)))        # one array: the Dense reads the new table
    np.testing.assert_allclose(again.predict(x), np.broadcast_to(again.layers[-1].weight("bias"), (B, T, V)))


@pytest.mark.parametrize(("make", "err", "match"), [
    (lambda e: rk.Dense(V + 1, tie_to=e), InvalidInputError, r"table is \(7, 3\).*units=7.*got units=8"),
    (lambda e: rk.Dense(V, tie_to=rk.Dense(3)), InvalidParameterError, r"tie_to must be an Embedding"),
    (lambda e: rk.Dense(V, tie_to=e, kernel_regularizer="l2"), InvalidParameterError, r"no kernel of its"),
])
def test_bad_ties(make: Any, err: type, match: str) -> None:
    emb = rk.layers.Embedding(V, D)
    with pytest.raises(err, match=match):
        rk.Sequential([emb, make(emb)], input_shape=(None, T))


def test_a_tied_dense_refuses_a_kernel() -> None:
    _, _, dense = _tied()
    with pytest.raises(InvalidParameterError, match="pass kernel=None"):
        dense.set_weights(np.zeros((D, V)), np.zeros(V))


def test_onnx_export_computes_the_tied_model_and_keras_export_refuses_it(tmp_path: Path) -> None:
    ort = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    model, _, dense = _tied(seed=5)
    dense.set_weights(None, np.random.default_rng(6).standard_normal(V))
    x, _ = _data()
    rk.save_onnx(model, str(tmp_path / "tied.onnx"))
    sess = ort.InferenceSession(str(tmp_path / "tied.onnx"), providers=["CPUExecutionProvider"])
    feed = {sess.get_inputs()[0].name: x.astype(np.int64)}   # an Embedding takes int64 indices in ONNX
    np.testing.assert_allclose(sess.run(None, feed)[0], model.predict(x), rtol=1e-12, atol=1e-12)
    with pytest.raises(rk.io.UnsupportedFeatureError, match="no weight tying"):
        rk.io.save_keras(model, str(tmp_path / "tied.keras"))
