"""``fit`` is the plain training loop and nothing more: its weights and losses equal, bit for
bit, those of an independent loop written here over ``layer.forward`` / ``layer.backward``,
the loss and the optimizer; and a step runs none of the checks that cannot find anything new
(the optimizer's argument checks, per-batch callback dispatch nobody listens to), while a
weight an optimizer step makes NaN/Inf is still named, with the step that made it."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.models._callbacks import CallbackList
from rnnkit.optimizers import Optimizer

N, T, F, H, BS = 10, 5, 3, 4, 4


def _data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    return rng.standard_normal((N, T, F)), rng.standard_normal((N, 1))


def _model(opt: Any) -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(H, seed=3, dtype="float64"), rk.Dense(1, "linear", seed=4, dtype="float64")])
    m.compile(opt, "mse")
    m.build((None, T, F))
    return m


OPTIMIZERS = {
    "sgd_momentum": lambda: rk.optimizers.SGD(0.05, momentum=0.9),
    "adam": lambda: rk.optimizers.Adam(0.01),
    "rmsprop_clipnorm": lambda: rk.optimizers.RMSprop(0.01, clipnorm=0.5),
}


def _plain_loop(opt: Any, x: np.ndarray, y: np.ndarray, epochs: int) -> tuple[list[np.ndarray], list[float]]:
    """The reference: consecutive batches of BS, forward, MSE, backward, one optimizer step;
    the epoch loss the sample-weighted mean of the batch losses."""
    lstm = rk.LSTM(H, seed=3, dtype="float64")
    dense = rk.Dense(1, "linear", seed=4, dtype="float64")
    lstm.build((None, T, F))
    dense.build((None, H))
    mse = rk.losses.MeanSquaredError()
    losses = []
    for _ in range(epochs):
        total = 0.0
        for a in range(0, N, BS):
            xb, yb = x[a:a + BS], y[a:a + BS]
            ctx = rk.Ctx.training(0)
            pred = dense.forward(lstm.forward(xb, ctx), ctx)
            value, g = mse.value_and_grad(yb, pred)
            lstm.backward(dense.backward(g, ctx), ctx)
            opt.apply_gradients([(la, n, ctx.grads[(la, n)]) for la in (lstm, dense)
                                 for n in la.weight_names])
            total += len(xb) * value
        losses.append(total / N)
    return [*lstm.get_weights(), *dense.get_weights()], losses


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_fit_equals_a_plain_loop_bit_for_bit(name: str) -> None:
    x, y = _data()
    m = _model(OPTIMIZERS[name]())
    hist = m.fit(x, y, 3, batch_size=BS, shuffle=False, verbose=0)
    weights, losses = _plain_loop(OPTIMIZERS[name](), x, y, 3)
    for got, want in zip(m.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(got, want)
    assert hist.history["loss"] == losses


def test_a_step_runs_no_optimizer_argument_checks_and_no_unheard_batch_hooks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: dict[str, Any] = {"check_pairs": 0, "hooks": []}
    real_check = Optimizer._check_pairs

    def counting_check(self: Optimizer, pairs: Any) -> Any:
        calls["check_pairs"] += 1
        return real_check(self, pairs)

    real_call = CallbackList.call

    def counting_call(self: CallbackList, hook: str, *args: Any) -> None:
        calls["hooks"].append(hook)
        real_call(self, hook, *args)

    monkeypatch.setattr(Optimizer, "_check_pairs", counting_check)
    monkeypatch.setattr(CallbackList, "call", counting_call)
    x, y = _data()
    m = _model(rk.optimizers.SGD(0.01))
    stop = rk.callbacks.EarlyStopping(monitor="loss", patience=5)
    m.fit(x, y, 2, batch_size=BS, verbose=0, callbacks=[stop])
    assert calls["check_pairs"] == 0
    assert calls["hooks"] == ["on_train_begin", "on_epoch_begin", "on_epoch_end", "on_epoch_begin",
                              "on_epoch_end", "on_train_end"]
    # a callback that listens to the batches gets every one, with the epoch's running mean so far
    # (Keras 3's batch logs): the last batch's is the epoch's loss
    seen: list[tuple[int, float]] = []
    lam = rk.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: seen.append((b, logs["loss"])))
    calls["hooks"] = []
    hist = m.fit(x, y, 1, batch_size=BS, verbose=0, shuffle=False, callbacks=[lam])
    assert [b for b, _ in seen] == [0, 1, 2]
    assert np.isclose(seen[-1][1], hist.history["loss"][0], rtol=1e-14, atol=0)
    # the optimizer still checks what a caller hands it directly
    with pytest.raises(rk.InvalidInputError, match="must have the weight's shape"):
        m.optimizer.apply_gradients([(m.layers[1], "kernel", np.zeros((2, 2)))])


class _Burst(Optimizer):
    """SGD that, at step ``at`` (counting from 1), writes +inf into the Dense kernel."""

    def __init__(self, at: int) -> None:
        super().__init__(0.01)
        self.at = at

    def _update(self, w: np.ndarray, g: np.ndarray, state: dict[str, Any], lr: float) -> np.ndarray:
        new = w - lr * g
        if self.iterations + 1 == self.at and w.shape == (H, 1):
            new[0, 0] = np.inf
        return new


@pytest.mark.parametrize("at, where", [(2, r"epoch 1/3 \(batch 2/3\)"), (3, r"epoch 1/3 \(batch 3/3\)"),
                                       (5, r"epoch 2/3 \(batch 2/3\)")])
def test_a_weight_an_optimizer_step_made_non_finite_is_named_with_that_step(at: int, where: str) -> None:
    x, y = _data()
    m = _model(_Burst(at))
    with pytest.raises(rk.NonFiniteError, match=where + r".*first at weight 1\.kernel \(Dense\) after the "
                                                       r"optimizer step"):
        m.fit(x, y, 3, batch_size=BS, shuffle=False, verbose=0)
    # a callback listening to the batches never sees the non-finite weight
    finite: list[bool] = []
    cb = rk.callbacks.LambdaCallback(
        on_train_batch_end=lambda b, logs: finite.append(all(np.isfinite(w).all() for w in m.get_weights())))
    m = _model(_Burst(at))
    with pytest.raises(rk.NonFiniteError, match=where):
        m.fit(x, y, 3, batch_size=BS, shuffle=False, verbose=0, callbacks=[cb])
    assert finite == [True] * (at - 1)


class _Counting(rk.optimizers.SGD):
    """An optimizer that overrides ``apply_gradients``: fit calls it, checks and all."""

    def __init__(self) -> None:
        super().__init__(0.05)
        self.calls = 0

    def apply_gradients(self, pairs: Any) -> list[np.ndarray]:
        self.calls += 1
        return super().apply_gradients(pairs)


def test_an_optimizer_overriding_apply_gradients_is_called_each_step() -> None:
    x, y = _data()
    opt = _Counting()
    m = _model(opt)
    m.fit(x, y, 2, batch_size=BS, shuffle=False, verbose=0)
    assert opt.calls == 6
    weights, _ = _plain_loop(rk.optimizers.SGD(0.05), x, y, 2)
    for got, want in zip(m.get_weights(), weights, strict=True):
        np.testing.assert_array_equal(got, want)
