"""Keras subclassing of ``rk.Model``: layers made in ``__init__``, the pass in ``call``, trained by
the one trainer through the model's own tape, and ``train_step`` overridden as in Keras 3.

Oracles: the same model built as a ``Sequential`` with the same weights (the same layer passes
in the same order: equal to the bit), PyTorch autograd with copied weights, and Keras 3 on its
torch backend running the same ``train_step``."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip

T, F, U, O = 5, 3, 6, 2  # noqa: E741  (steps, features, units, outputs)


def data(n: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, T, F)).astype(np.float32), rng.normal(size=(n, O)).astype(np.float32)


class Tagger(rk.Model):
    """An LSTM encoder and a Dense head."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.encoder = rk.LSTM(U, seed=1)
        self.head = rk.Dense(O, seed=2)

    def call(self, inputs: Any, training: bool = False) -> Any:
        return self.head(self.encoder(inputs))


class Stepper(rk.Model):
    """The same model, its LSTM stepped one timestep at a time in ``call`` (the state handed
    from step to step as ``initial_state``)."""

    def __init__(self) -> None:
        super().__init__()
        self.cell = rk.LSTM(U, return_state=True, seed=1)
        self.head = rk.Dense(O, seed=2)

    def call(self, inputs: Any, training: bool = False) -> Any:
        state = None
        for t in range(inputs.shape[1]):
            _, h, c = self.cell(inputs[:, t:t + 1], initial_state=state)
            state = [h, c]
        return self.head(h)


def sequential_twin(model: rk.Model, x: np.ndarray) -> rk.Sequential:
    seq = rk.Sequential([rk.LSTM(U), rk.Dense(O)])
    seq.build(x.shape)
    model.build(x.shape)
    seq.set_weights(model.get_weights())
    return seq


def test_fit_is_the_sequential_fit_to_the_bit() -> None:
    """Batches, shuffling, validation data, sample weights, a callback: the same layer passes
    in the same order with the same gradients, so every loss and weight is bit-identical."""
    x, y = data()
    xv, yv = data(6, seed=9)
    sw = np.linspace(0.5, 1.5, len(x))
    model = Tagger()
    seq = sequential_twin(model, x)
    seen: list[dict[str, float]] = []
    logs_cb = rk.LambdaCallback(on_epoch_end=lambda e, logs: seen.append(dict(logs)))
    for m in (model, seq):
        m.compile(rk.optimizers.Adam(0.01), "mse", metrics=["mae"])
    h1 = model.fit(x, y, epochs=3, batch_size=6, seed=3, validation_data=(xv, yv), sample_weight=sw,
                   callbacks=[logs_cb])
    h2 = seq.fit(x, y, epochs=3, batch_size=6, seed=3, validation_data=(xv, yv), sample_weight=sw)
    assert h1.history == h2.history
    assert set(h1.history) == {"loss", "mae", "val_loss", "val_mae"}
    assert seen == [{k: v[e] for k, v in h2.history.items()} for e in range(3)]
    for a, b in zip(model.get_weights(), seq.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(model.predict(x), seq.predict(x))
    assert model.evaluate(x, y) == seq.evaluate(x, y)
    m2, s2 = Tagger(), rk.Sequential([rk.LSTM(U), rk.Dense(O)])   # validation_split too
    s2 = sequential_twin(m2, x)
    for m in (m2, s2):
        m.compile(rk.optimizers.SGD(0.1), "mse")
    assert (m2.fit(x, y, epochs=2, batch_size=6, seed=3, validation_split=0.25).history
            == s2.fit(x, y, epochs=2, batch_size=6, seed=3, validation_split=0.25).history)


def test_a_timestep_loop_trains_as_the_whole_sequence_layer() -> None:
    """``call`` stepping the LSTM over the timesteps is the LSTM over the sequence: losses and
    weights equal to float32 rounding (per step the input projection is one (B,F)x(F,4U) GEMM
    instead of a slice of one (B*T,F)x(F,4U) GEMM; the sums differ only in order, relative
    1e-6 per value, and 3 epochs of 4 Adam steps keep them within 1e-4 relative)."""
    x, y = data()
    model = Stepper()
    seq = sequential_twin(model, x)
    for m in (model, seq):
        m.compile(rk.optimizers.Adam(0.01), "mse")
    h1 = model.fit(x, y, epochs=3, batch_size=5, seed=4)
    h2 = seq.fit(x, y, epochs=3, batch_size=5, seed=4)
    np.testing.assert_allclose(h1.history["loss"], h2.history["loss"], rtol=1e-5)
    for a, b in zip(model.get_weights(), seq.get_weights(), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("cls", [Tagger, Stepper])
def test_gradients_equal_pytorch_autograd(cls: type) -> None:
    """The tape's gradients of an MSE loss w.r.t. every weight, against torch autograd with the
    weights copied: float32, |diff| <= 1e-5 * max|grad| (a few hundred float32 products per
    value, each exact to 6e-8 relative)."""
    torch = pytest.importorskip("torch")
    x, y = data(8)
    model = cls()
    model.build(x.shape)
    lstm = model.encoder if cls is Tagger else model.cell
    with rk.GradientTape() as tape:
        loss = rk.losses.MeanSquaredError()(y, model(x, training=True))
    grads = dict(zip(model.named_weights(), tape.gradient(loss, model.trainable_weights), strict=True))

    t_lstm = torch.nn.LSTM(F, U, batch_first=True)
    t_head = torch.nn.Linear(U, O)
    k, rk_, b = lstm.get_weights()
    with torch.no_grad():
        t_lstm.weight_ih_l0.copy_(torch.from_numpy(k.T.copy()))
        t_lstm.weight_hh_l0.copy_(torch.from_numpy(rk_.T.copy()))
        t_lstm.bias_ih_l0.copy_(torch.from_numpy(b.reshape(-1).copy()))
        t_lstm.bias_hh_l0.zero_()
        t_head.weight.copy_(torch.from_numpy(model.head.weight("kernel").T.copy()))
        t_head.bias.copy_(torch.from_numpy(model.head.weight("bias").copy()))
    out, (hn, _) = t_lstm(torch.from_numpy(x))
    t_loss = torch.mean((t_head(hn[0]) - torch.from_numpy(y)) ** 2)
    t_loss.backward()
    assert float(loss) == pytest.approx(float(t_loss), rel=1e-6)
    pre = "encoder" if cls is Tagger else "cell"
    want = {f"{pre}.kernel": t_lstm.weight_ih_l0.grad.numpy().T,
            f"{pre}.recurrent_kernel": t_lstm.weight_hh_l0.grad.numpy().T,
            f"{pre}.bias": t_lstm.bias_ih_l0.grad.numpy(),
            "head.kernel": t_head.weight.grad.numpy().T, "head.bias": t_head.bias.grad.numpy()}
    for name, g in want.items():
        got = grads[name].reshape(g.shape)
        assert np.abs(got - g).max() <= 1e-5 * np.abs(g).max(), name


class CustomStep(Tagger):
    """Keras 3's custom ``train_step``, written as its guide writes it."""

    def train_step(self, data: Any) -> dict[str, Any]:
        x, y = data
        with rk.GradientTape() as tape:
            y_pred = self(x, training=True)
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
        grads = tape.gradient(loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
        for metric in self.metrics:
            if metric.name == "loss":
                metric.update_state(loss)
            else:
                metric.update_state(y, y_pred)
        return {m.name: m.result() for m in self.metrics}


def test_custom_train_step_gives_keras_losses() -> None:
    """The same train_step in Keras 3 (torch backend) with the weights copied: the per-epoch
    losses (the loss tracker's running mean over the epoch's batches) agree to 1e-5 relative
    (float32 passes and SGD updates; the two frameworks' sums run in different orders)."""
    keras = keras_or_skip()
    import torch

    class KerasStep(keras.Model):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.encoder = keras.layers.LSTM(U)
            self.head = keras.layers.Dense(O)

        def call(self, inputs: Any, training: bool = False) -> Any:
            return self.head(self.encoder(inputs))

        def train_step(self, data: Any) -> dict[str, Any]:
            x, y = data
            y_pred = self(x, training=True)
            self.zero_grad()
            loss = self.compute_loss(x=x, y=y, y_pred=y_pred)
            loss.backward()
            grads = [v.value.grad for v in self.trainable_weights]
            with torch.no_grad():
                self.optimizer.apply(grads, self.trainable_weights)
            for metric in self.metrics:
                if metric.name == "loss":
                    metric.update_state(loss)
                else:
                    metric.update_state(y, y_pred)
            return {m.name: m.result() for m in self.metrics}

    x, y = data(24)
    model = CustomStep()
    model.build(x.shape)
    km = KerasStep()
    km(x[:1])
    km.set_weights([w.reshape(v.shape) for w, v in zip(model.get_weights(), km.get_weights(), strict=True)])
    model.compile(rk.optimizers.SGD(0.1), "mse")
    km.compile(keras.optimizers.SGD(0.1), "mse")
    got = model.fit(x, y, epochs=3, batch_size=8, shuffle=False).history
    want = km.fit(x, y, epochs=3, batch_size=8, shuffle=False, verbose=0).history
    assert list(got) == ["loss"]
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)


def test_custom_train_step_logs_reach_the_callbacks_as_keras_gives_them() -> None:
    """Each batch's logs are what train_step returned; the epoch's are the last batch's (the
    trackers' running means); the trackers are reset at each epoch's start."""
    x, y = data(24)
    model = CustomStep()
    model.compile(rk.optimizers.SGD(0.05), "mse", metrics=["mae"])
    batches: list[dict[str, float]] = []
    epochs: list[dict[str, float]] = []
    cb = rk.LambdaCallback(on_train_batch_end=lambda b, logs: batches.append(dict(logs)),
                           on_epoch_end=lambda e, logs: epochs.append(dict(logs)))
    hist = model.fit(x, y, epochs=2, batch_size=8, shuffle=False, callbacks=[cb]).history
    assert [list(b) for b in batches] == [["loss", "mae"]] * 6
    assert epochs == [batches[2], batches[5]]
    assert hist == {k: [batches[2][k], batches[5][k]] for k in ("loss", "mae")}
    assert model.metrics[0].count == 3   # this epoch's 3 batches only
    # the running mean: the third batch's value is the mean of the epoch's three batch losses
    loss_fn = rk.losses.MeanSquaredError()
    assert batches[0]["loss"] > 0 and np.isfinite([b["loss"] for b in batches]).all()
    assert float(model.compute_loss(y=y[:8], y_pred=model.predict(x[:8]))) == pytest.approx(
        loss_fn(y[:8], model.predict(x[:8])))


def test_weight_names_follow_attributes_and_files_round_trip(tmp_path: Path) -> None:
    class Blocks(rk.Model):
        def __init__(self) -> None:
            super().__init__(name="blocks_model")
            self.encoder = rk.GRU(4, seed=1)
            self.blocks = [rk.Dense(5, seed=2), rk.Dense(3, seed=3)]
            self.heads = {"mean": rk.Dense(1, seed=4), "scale": rk.Dense(1, seed=5)}

        def call(self, inputs: Any, training: bool = False) -> Any:
            h = self.encoder(inputs)
            for block in self.blocks:
                h = block(h)
            return [self.heads["mean"](h), self.heads["scale"](h)]

    x, _ = data(6)
    model = Blocks()
    out = model.predict(x)
    assert len(out) == 2 and model.n_outputs == 2
    assert list(model.named_weights()) == [
        "encoder.kernel", "encoder.recurrent_kernel", "encoder.bias", "blocks.0.kernel", "blocks.0.bias",
        "blocks.1.kernel", "blocks.1.bias", "heads.mean.kernel", "heads.mean.bias", "heads.scale.kernel",
        "heads.scale.bias"]
    text = model.summary(print_fn=None)
    rows = [ln.split()[0] for ln in text.splitlines()[4:9]]
    assert rows == ["encoder", "blocks.0", "blocks.1", "heads.mean", "heads.scale"]
    assert 'Model: "blocks_model"' in text and f"Total params: {model.param_count():,}" in text
    path = tmp_path / "w.safetensors"
    model.save_weights(str(path))
    other = Blocks()
    other.build(x.shape)
    other.load_weights(str(path))
    for a, b in zip(model.predict(x), other.predict(x), strict=True):
        np.testing.assert_array_equal(a, b)
    assert Tagger().name == "tagger"


def test_resume_from_a_checkpoint_is_bit_identical(tmp_path: Path) -> None:
    """A fit interrupted after 2 of 4 epochs and resumed by a fresh instance of the class (its
    optimizer state found by the attribute weight names) ends as the uninterrupted fit."""
    x, y = data()
    whole = Tagger()
    whole.compile(rk.optimizers.Adam(0.01), "mse")
    h = whole.fit(x, y, epochs=4, batch_size=5, seed=7)

    class Stop(rk.models.Callback):  # type: ignore[name-defined,misc]
        def on_epoch_end(self, epoch: int, logs: object = None) -> None:
            if epoch == 1:
                raise KeyboardInterrupt

    first = Tagger()
    first.compile(rk.optimizers.Adam(0.01), "mse")
    with pytest.raises(KeyboardInterrupt):
        first.fit(x, y, epochs=4, batch_size=5, seed=7, checkpoint=str(tmp_path), callbacks=[Stop()])
    resumed = Tagger()
    resumed.compile(rk.optimizers.Adam(0.01), "mse")
    h2 = resumed.fit(x, y, epochs=4, batch_size=5, seed=7, checkpoint=str(tmp_path))
    assert h2.history["loss"] == h.history["loss"]
    for a, b in zip(whole.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_dropout_in_call_follows_training_and_the_step_seed() -> None:
    """``training=True`` given to the model reaches a layer call that does not say it (Keras'
    call context); fit's passes draw their dropout masks from the step seeds, so two fits of
    one seed are equal and the masks differ between steps."""
    class Drop(Tagger):
        def __init__(self) -> None:
            super().__init__()
            self.drop = rk.Dropout(0.5)

        def call(self, inputs: Any, training: bool = False) -> Any:
            return self.head(self.drop(self.encoder(inputs)))

    x, y = data(10)
    m = Drop()
    np.testing.assert_array_equal(m.predict(x), m(x))
    with rk.GradientTape():
        a = m(x, training=True)
        b = m(x, training=False)
    assert not np.array_equal(a, b)
    np.testing.assert_array_equal(b, m.predict(x))
    runs = []
    for _ in range(2):
        mm = Drop()
        mm.compile(rk.optimizers.SGD(0.1), "mse")
        runs.append((mm.fit(x, y, epochs=2, batch_size=5, seed=1).history["loss"], mm.get_weights()))
    assert runs[0][0] == runs[1][0]
    for p, q in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_array_equal(p, q)


def test_refusals_are_typed_and_say_what_was_wrong() -> None:
    x, y = data(4)

    class NoCall(rk.Model):
        def __init__(self) -> None:
            super().__init__()
            self.d = rk.Dense(1)

    with pytest.raises(rk.NotBuiltError, match="defines no call"):
        NoCall().predict(x)

    class MadeInCall(rk.Model):
        def call(self, inputs: Any, training: bool = False) -> Any:
            return rk.Dense(1)(inputs[:, -1])

    with pytest.raises(rk.InvalidInputError, match="does not track"):
        MadeInCall().predict(x)

    m = Tagger()
    m.predict(x)
    with pytest.raises(rk.InvalidInputError, match="after the model was built"):
        m.extra = rk.Dense(1)

    class Early(rk.Model):
        def __init__(self) -> None:
            self.d = rk.Dense(1)
            super().__init__()

    with pytest.raises(rk.InvalidInputError, match=r"before super\(\)\.__init__\(\) ran"):
        Early()

    class BadStep(Tagger):
        def train_step(self, data: Any) -> Any:
            return 1.0

    bad = BadStep()
    bad.compile("sgd", "mse")
    with pytest.raises(rk.InvalidInputError, match="must return a dict"):
        bad.fit(x, y)

    class NotArrays(Tagger):
        def call(self, inputs: Any, training: bool = False) -> Any:
            return "out"

    with pytest.raises(rk.InvalidInputError, match="expected arrays of floats"):
        NotArrays().predict(x)
    with pytest.raises(rk.InvalidInputError, match="takes no mask="):
        m.predict(x, mask=np.ones((4, T), bool))
    with pytest.raises(rk.InvalidParameterError, match="takes name= only"):
        Tagger(units=3)


MPI_SCRIPT = '''
import sys
import numpy as np
import rnnkit as rk

class Tagger(rk.Model):
    def __init__(self):
        super().__init__()
        self.encoder = rk.LSTM(6, seed=1)
        self.head = rk.Dense(2, seed=2)

    def call(self, inputs, training=False):
        return self.head(self.encoder(inputs))

rng = np.random.default_rng(0)
x = rng.normal(size=(20, 5, 3)).astype(np.float32)
y = rng.normal(size=(20, 2)).astype(np.float32)
sw = np.linspace(0.5, 1.5, 20)
m = Tagger()
m.compile(rk.optimizers.SGD(0.1), "mse")
h = m.fit(x, y, epochs=2, batch_size=8, seed=3, sample_weight=sw, distributed=rk.distributed.MPI())
from mpi4py import MPI
if MPI.COMM_WORLD.rank == 0:
    np.savez(sys.argv[1], loss=np.array(h.history["loss"]), *m.get_weights())
'''


def test_mpi_fit_of_a_subclassed_model_equals_one_process(tmp_path: Path) -> None:
    """``distributed=rk.distributed.MPI()`` on two ranks: the same losses and weights as one
    process, to float32 rounding (each rank's gradient over its half of a batch, summed: the
    sums run in another order, 1e-6 relative per value; 5 SGD steps of 0.1 keep the weights
    within 1e-5)."""
    from test_distributed import MPIEXEC, mpirun
    if importlib.util.find_spec("mpi4py") is None or MPIEXEC is None:
        pytest.skip("needs mpi4py and mpiexec")
    script = tmp_path / "fit.py"
    script.write_text(MPI_SCRIPT)
    out = tmp_path / "rank0.npz"
    proc = mpirun(2, [sys.executable, str(script), str(out)], tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got = np.load(out)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(20, T, F)).astype(np.float32)
    y = rng.normal(size=(20, O)).astype(np.float32)
    m = Tagger()
    m.compile(rk.optimizers.SGD(0.1), "mse")
    h = m.fit(x, y, epochs=2, batch_size=8, seed=3, sample_weight=np.linspace(0.5, 1.5, 20))
    np.testing.assert_allclose(got["loss"], h.history["loss"], rtol=1e-5)
    for k, w in enumerate(m.get_weights()):
        np.testing.assert_allclose(got[f"arr_{k}"], w, atol=1e-5)


def test_a_loss_object_called_in_train_step_is_recorded_on_the_tape() -> None:
    """``self.loss_fn(y, y_pred)`` (a Keras loss object kept by the model) in place of
    ``compute_loss``: the loss is recorded on the tape with its own gradient, so the training is
    the compute_loss one to the bit; outside a tape the loss is a float."""
    class LossFn(CustomStep):
        def __init__(self) -> None:
            super().__init__()
            self.loss_fn = rk.losses.MeanSquaredError()

        def train_step(self, data: Any) -> dict[str, Any]:
            x, y = data
            with rk.GradientTape() as tape:
                loss = self.loss_fn(y, self(x, training=True))
            grads = tape.gradient(loss, self.trainable_weights)
            self.optimizer.apply_gradients(zip(grads, self.trainable_weights, strict=True))
            self.metrics[0].update_state(loss)
            return {"loss": self.metrics[0].result()}

    x, y = data(16)
    runs = []
    for cls in (CustomStep, LossFn):
        m = cls()
        m.compile(rk.optimizers.SGD(0.1), "mse")
        runs.append((m.fit(x, y, epochs=2, batch_size=8, shuffle=False).history, m.get_weights()))
    assert runs[0][0] == runs[1][0]
    for a, b in zip(runs[0][1], runs[1][1], strict=True):
        np.testing.assert_array_equal(a, b)
    assert isinstance(rk.losses.MeanSquaredError()(y, y + 1.0), float)
