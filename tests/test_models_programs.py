"""Small model programs (Sequential LSTM / GRU / SimpleRNN, Embedding) with their stated results, plus
the whole training loop against torch.optim on identical weights."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.layers import Dense, Embedding
from rnnkit.models import SequentialBuilder

# 4 sequences, 3 timesteps, 1 feature; target = the sum of the 3 scalars
X3 = np.array([0.1, 0.2, 0.1, 0.3, 0.1, 0.2, 0.0, 0.2, 0.2, 0.2, 0.2, 0.1], np.float32).reshape(4, 3, 1)
Y3 = np.array([0.4, 0.6, 0.4, 0.5], np.float32).reshape(4, 1)
# 4 sentences of 4 tokens; label 1 when the sentence opens with token 1
XE = np.array([1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 7, 8, 5, 6, 3, 4], np.float32).reshape(4, 4)
YE = np.array([1.0, 0.0, 1.0, 0.0], np.float32).reshape(4, 1)


def _adam() -> rk.Adam:
    return rk.Adam(0.01, 0.9, 0.999, 1e-8, 0.0)


@pytest.mark.parametrize("cell", [rk.LSTM, rk.GRU, rk.SimpleRNN])
def test_sum_of_three_within_5_percent_after_300_epochs(cell: type[rk.RecurrentLayer]) -> None:
    # The program seeds only the recurrent layer (42); the unseeded Dense draws from the global
    # stream, fixed here so the test is deterministic. Measured over global seeds 0..11 the
    # worst relative error was LSTM 3.9-5.9 %, GRU 1.7-3.8 %, SimpleRNN 1.2-4.1 %; the LSTM
    # trajectory equals torch's step for step (test below), so the margin is the task's.
    rk.set_global_seed(0)
    model = (SequentialBuilder()
             .add(cell(16, rk.Tanh()).with_random_state(42))
             .add(Dense(1, rk.Linear()))
             .build(rk.Shape.with_free_batch(X3.shape)))
    model.compile(_adam(), rk.MeanSquaredError())
    hist = model.fit(X3, Y3, 300)
    pred = model.predict(X3)
    assert pred.shape == (4, 1) and pred.dtype == np.float32
    rel = np.abs(pred - Y3) / Y3
    assert rel.max() < 0.05, f"{cell.__name__}: predictions {pred.ravel()}, relative errors {rel.ravel()}"
    assert len(hist.history["loss"]) == 300 and hist.history["loss"][-1] < hist.history["loss"][0] / 50


def test_stacked_lstm_program_trains() -> None:
    rk.set_global_seed(0)
    model = (SequentialBuilder()
             .add(rk.LSTM(8, rk.Tanh()).with_random_state(42).with_return_sequences(True))
             .add(rk.LSTM(8, rk.Tanh()).with_random_state(43))
             .add(Dense(1, rk.Linear()))
             .build(rk.Shape.with_free_batch(X3.shape)))
    model.compile(_adam(), rk.MeanSquaredError())
    hist = model.fit(X3, Y3, 200)
    pred = model.predict(X3)
    assert pred.shape == (4, 1)
    loss = hist.history["loss"]
    assert loss[-1] < loss[0] / 20, f"loss {loss[0]} -> {loss[-1]}"
    assert np.abs(pred - Y3).max() < 0.05


def _classifier() -> rk.Sequential:
    return (SequentialBuilder()
            .add(Embedding(10, 8).with_random_state(42))
            .add(rk.LSTM(16, rk.Tanh()).with_random_state(7))
            .add(Dense(1, rk.Sigmoid()).with_random_state(3))
            .build(rk.Shape.with_free_batch(XE.shape)))


# written by hand from the rules in rnnkit/models/_summary.py: column widths 13 / 12 / 7
# (widest cell or header), 2-space gaps, width 36; Embedding 10*8 = 80, LSTM
# 4*(8*16 + 16*16 + 16) = 1600, Dense 16 + 1 = 17, total 1697
CLASSIFIER_SUMMARY = """\
Model: "sequential"
====================================
Layer (type)   Output Shape  Param #
------------------------------------
0 (Embedding)  (None, 4, 8)  80
1 (LSTM)       (None, 16)    1,600
2 (Dense)      (None, 1)     17
====================================
Total params: 1,697
Trainable params: 1,697
Non-trainable params: 0"""


def test_embedding_lstm_classifier_within_a_thousandth_after_200_epochs(
    capsys: pytest.CaptureFixture[str],
) -> None:
    model = _classifier()
    model.compile(_adam(), rk.BinaryCrossEntropy())
    text = model.summary()  # before any forward pass
    assert text == CLASSIFIER_SUMMARY
    assert capsys.readouterr().out == CLASSIFIER_SUMMARY + "\n"
    model.fit(XE, YE, 200)
    pred = model.predict(XE)
    err = np.abs(pred - YE).max()
    assert err < 1e-3, f"predictions {pred.ravel()}"


def test_training_loop_equals_torch_adam_step_for_step() -> None:
    torch = pytest.importorskip("torch")
    x, y = X3.astype(np.float64), Y3.astype(np.float64)
    model = (SequentialBuilder().add(rk.LSTM(16, dtype="float64", seed=42))
             .add(Dense(1, dtype="float64", seed=1)).build((None, 3, 1)))
    model.compile(_adam(), rk.MeanSquaredError())
    w = {k: np.array(layer.weight(n)) for k, (layer, n) in model.named_weights().items()}
    lstm, dense = torch.nn.LSTM(1, 16, batch_first=True).double(), torch.nn.Linear(16, 1).double()
    with torch.no_grad():  # Keras layout -> torch layout; one bias, so bias_hh stays 0, frozen
        lstm.weight_ih_l0.copy_(torch.tensor(w["0.kernel"].T))
        lstm.weight_hh_l0.copy_(torch.tensor(w["0.recurrent_kernel"].T))
        lstm.bias_ih_l0.copy_(torch.tensor(w["0.bias"][0]))
        lstm.bias_hh_l0.zero_()
        dense.weight.copy_(torch.tensor(w["1.kernel"].T))
        dense.bias.copy_(torch.tensor(w["1.bias"]))
    lstm.bias_hh_l0.requires_grad_(False)
    params = [lstm.weight_ih_l0, lstm.weight_hh_l0, lstm.bias_ih_l0, *dense.parameters()]
    opt = torch.optim.Adam(params, lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    tx, ty = torch.tensor(x), torch.tensor(y)
    losses = []
    for _ in range(100):
        opt.zero_grad()
        loss = ((dense(lstm(tx)[0][:, -1]) - ty) ** 2).mean()
        losses.append(loss.item())
        loss.backward()
        opt.step()
    hist = model.fit(x, y, 100)
    np.testing.assert_allclose(hist.history["loss"], losses, rtol=1e-9)
    with torch.no_grad():
        ref = dense(lstm(tx)[0][:, -1]).numpy()
    np.testing.assert_allclose(model.predict(x), ref, rtol=1e-9, atol=1e-12)
