"""``rnnkit.rnn`` nets inside ``Sequential``: the net states its input layout (``input_layout``,
from ``batch_first``) and a Keras-style ``input_shape`` is read by it; outputs against PyTorch
with copied weights, and a time-major tied word language model (Embedding -> rnn.lstm -> tied
Dense) trained against PyTorch's over 20 Adam steps."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit._errors import InvalidInputError

T, B, F, H, V = 6, 3, 1, 4, 9


def _net(batch_first: bool, in_dim: int = F, hidden: int = H) -> Any:
    return rk.rnn.lstm(in_dim, hidden, rk.rnn.RNNConfig(batch_first=batch_first), dtype="float64")


@pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "time_major"])
def test_keras_input_shape_is_read_by_the_nets_layout(batch_first: bool) -> None:
    torch = pytest.importorskip("torch")
    net = _net(batch_first)
    assert net.input_layout == ("batch_first" if batch_first else "time_major")
    model = rk.Sequential([net, rk.Dense(1, dtype="float64")], input_shape=(None, 1))
    assert model.input_shapes()[0].rank == 3
    torch.manual_seed(0)
    tl = torch.nn.LSTM(F, H, batch_first=batch_first).double()
    lin = torch.nn.Linear(H, 1).double()
    net.load_state_dict({k: v.detach().numpy() for k, v in tl.state_dict().items()})
    model.layers[1].set_weights(lin.weight.detach().numpy().T.copy(), lin.bias.detach().numpy().copy())
    x = np.random.default_rng(0).standard_normal((B, T, F) if batch_first else (T, B, F))
    want = lin(tl(torch.tensor(x))[0]).detach().numpy()
    np.testing.assert_allclose(model.predict(x), want, rtol=1e-10, atol=1e-12)


def test_a_fixed_length_sample_shape_puts_the_batch_axis_where_the_layout_says() -> None:
    model = rk.Sequential([_net(False), rk.Dense(1, dtype="float64")], input_shape=(T, 1))
    x = np.random.default_rng(1).standard_normal((T, B, F))
    assert model.predict(x).shape == (T, B, 1)
    with pytest.raises(InvalidInputError, match=r"expected a 3D input shape \(seq_len, batch, features\) "
                                                r"with 1 features"):
        rk.Sequential([_net(False)], input_shape=(None, None, 2))


def test_time_major_tied_word_language_model_trains_as_torch() -> None:
    torch = pytest.importorskip("torch")
    emb = rk.layers.Embedding(V, H, dtype="float64")
    net = _net(False, H, H)
    dense = rk.Dense(V, tie_to=emb, dtype="float64")
    model = rk.Sequential([emb, net, dense], input_shape=(None,))
    torch.manual_seed(1)
    enc, rnn = torch.nn.Embedding(V, H).double(), torch.nn.LSTM(H, H).double()
    dec = torch.nn.Linear(H, V).double()
    dec.weight = enc.weight
    emb.set_weights(enc.weight.detach().numpy().copy())
    net.load_state_dict({k: v.detach().numpy() for k, v in rnn.state_dict().items()})
    dense.set_weights(None, dec.bias.detach().numpy().copy())
    rng = np.random.default_rng(2)
    x, y = rng.integers(0, V, (T, B)).astype(np.float64), rng.integers(0, V, (T, B)).astype(np.float64)
    model.compile(rk.Adam(0.03, epsilon=1e-8), rk.losses.SparseCategoricalCrossentropy(from_logits=True))
    ours = model.fit(x, y, epochs=20, shuffle=False).history["loss"]   # whole batches (time-major)
    opt = torch.optim.Adam(list({id(p): p for m in (enc, rnn, dec) for p in m.parameters()}.values()),
                           lr=0.03, eps=1e-8)
    tx, ty = torch.tensor(x, dtype=torch.long), torch.tensor(y, dtype=torch.long)
    theirs = []
    for _ in range(20):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(dec(rnn(enc(tx))[0]).reshape(-1, V), ty.reshape(-1))
        loss.backward()
        opt.step()
        theirs.append(float(loss))
    np.testing.assert_allclose(ours, theirs, rtol=1e-10, atol=1e-12)


def test_a_time_major_model_refuses_what_would_cut_or_shuffle_its_time_axis() -> None:
    net = rk.rnn.lstm(3, 4, rk.rnn.RNNConfig(batch_first=False), seed=0)
    model = rk.Sequential([net, rk.Dense(1, seed=1)], input_shape=(None, 3))
    model.compile(optimizer=rk.SGD(0.1), loss="mse")
    x = np.random.default_rng(0).normal(size=(6, 2, 3))     # (seq_len 6, batch 2, features 3)
    y = np.zeros((6, 2, 1))
    for kw, word in (({"batch_size": 2, "shuffle": False}, "batch_size"), ({}, "shuffle"),
                     ({"shuffle": False, "validation_split": 0.5}, "validation_split")):
        with pytest.raises(rk.InvalidParameterError, match=f"{word} would split or reorder.*time-major"):
            model.fit(x, y, **kw)
    with pytest.raises(rk.InvalidParameterError, match="batch_size would split"):
        model.predict(x, batch_size=2)
    before = model.predict(x)
    model.fit(x, y, shuffle=False)                            # whole batches: accepted, trains
    assert not np.array_equal(model.predict(x), before)

