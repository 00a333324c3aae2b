"""Small programs of the recurrent layers (one layer built, run and inspected), with their
stated assertions and printed results."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk


def test_3_7_1_shape_demo(capsys: pytest.CaptureFixture[str]) -> None:
    # units = 3 hidden neurons. The feature count comes from the build.
    rnn = rk.SimpleRNN(3, rk.Tanh())
    rnn.build(rk.Shape.with_free_batch([2, 5, 4]))
    # (batch = 2, timesteps = 5, features = 4)
    x = np.zeros((2, 5, 4), dtype=np.float32)
    # An inference context runs the recurrence and records nothing for a backward pass
    ctx = rk.Ctx.inference()
    out = rnn.forward(x, ctx)
    print(f"output shape: {list(out.shape)}")
    assert capsys.readouterr().out == "output shape: [2, 3]\n"
    # zero input, zero bias, zero state: every state is tanh(0) = 0
    np.testing.assert_array_equal(out, np.zeros((2, 3)))
    with pytest.raises(rk.ForwardPassNotRunError):  # it recorded nothing
        rnn.backward(np.zeros((2, 3)), ctx)


def test_3_7_1_three_settings(capsys: pytest.CaptureFixture[str]) -> None:
    # 2 sequences, 5 timesteps, 4 features.
    n, t, f = np.meshgrid(np.arange(2), np.arange(5), np.arange(4), indexing="ij")
    x = ((n * 20 + t * 4 + f).astype(np.float32) * np.float32(0.01))
    assert x[1, 4, 3] == np.float32(0.39)

    # 1 inference context serves all 3 passes, because it records nothing.
    ctx = rk.Ctx.inference()

    # The default returns the last hidden state only.
    last_layer = rk.SimpleRNN(3, rk.Tanh()).with_random_state(1)
    last_layer.build(rk.Shape.with_free_batch([2, 5, 4]))
    last = last_layer.forward(x, ctx)
    assert last.shape == (2, 3)

    # return_sequences keeps the time axis, so the output is rank 3.
    sequence_layer = (rk.SimpleRNN(3, rk.Tanh()).with_random_state(1)
                      .with_return_sequences(True))
    sequence_layer.build(rk.Shape.with_free_batch([2, 5, 4]))
    sequence = sequence_layer.forward(x, ctx)
    assert sequence.shape == (2, 5, 3)

    # The last slot of the sequence is exactly the rank-2 output above.
    for i in range(2):
        for u in range(3):
            assert abs(sequence[i, 4, u] - last[i, u]) < 1e-6

    # go_backwards reads the input from last step to first. The output stays in
    # processing order, so slot 0 holds the state that came from input step 4.
    reversed_layer = (rk.SimpleRNN(3, rk.Tanh()).with_random_state(1)
                      .with_return_sequences(True).with_go_backwards(True))
    reversed_layer.build(rk.Shape.with_free_batch([2, 5, 4]))
    reversed_ = reversed_layer.forward(x, ctx)
    assert reversed_.shape == (2, 5, 3)
    assert abs(reversed_[0, 0, 0] - sequence[0, 0, 0]) > 1e-6

    print(f"last {list(last.shape)}, sequence {list(sequence.shape)}")
    assert capsys.readouterr().out == "last [2, 3], sequence [2, 5, 3]\n"

    # the stated meaning of slot 0, by hand from the weights
    W, U, b = (np.asarray(sequence_layer.weight(k), np.float64)
               for k in ("kernel", "recurrent_kernel", "bias"))
    np.testing.assert_allclose(reversed_[:, 0], np.tanh(x[:, 4] @ W + b), rtol=1e-5)
    np.testing.assert_allclose(sequence[:, 0], np.tanh(x[:, 0] @ W + b), rtol=1e-5)
    h = np.zeros((2, 3))
    for step in range(5):
        h = np.tanh(x[:, step] @ W + h @ U + b)
    np.testing.assert_allclose(last, h, rtol=1e-5, atol=1e-7)


def test_3_7_5_weights_listing(capsys: pytest.CaptureFixture[str]) -> None:
    # units = 8, and the build settles the 4 features per timestep.
    lstm = rk.LSTM(8, rk.Tanh()).with_random_state(42)
    lstm.build(rk.Shape.with_free_batch([2, 5, 4]))
    # All 4 gates are fused side by side: width == 4 * units.
    for entry in lstm.weights():
        print(f"{entry.name:<16} {list(entry.value.shape)}")
    assert capsys.readouterr().out == (
        "kernel           [4, 32]\n"
        "recurrent_kernel [8, 32]\n"
        "bias             [1, 32]\n"
    )
    # LSTM param_count = 4 * (input_dim * units + units * units + units)
    assert lstm.param_count() == 4 * (4 * 8 + 8 * 8 + 8) == 416
    # the forget-bias-1.0 rule still applies with a seed; the seed reproduces the draw
    np.testing.assert_array_equal(lstm.weight("bias")[0], np.r_[np.zeros(8), np.ones(8), np.zeros(16)])
    again = rk.LSTM(8, rk.Tanh()).with_random_state(42)
    again.build(rk.Shape.with_free_batch([2, 5, 4]))
    for e in lstm.weights():
        np.testing.assert_array_equal(e.value, again.weight(e.name))
