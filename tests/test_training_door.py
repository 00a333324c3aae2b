"""What ``fit`` / ``evaluate`` / ``predict`` check at the door, once, and what training guards:
hostile arguments and values get typed errors naming them, a tampered checkpoint is refused
before anything is restored, a layer trains in one fit at a time (shared layers included)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
import rnnkit.models._batch as batch_mod
import rnnkit.models._sequential as seq_mod
from rnnkit._safetensors import read_safetensors, write_safetensors
from rnnkit.models._resume import STATE_FILE


def _model(seed: int = 1) -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(3, seed=seed), rk.Dense(2, "linear", seed=seed + 1)], input_shape=(None, 4, 2))
    m.compile(rk.Adam(0.01), "mse")
    return m


def _data(n: int = 8) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(0)
    return r.standard_normal((n, 4, 2)).astype(np.float32), r.standard_normal((n, 2)).astype(np.float32)


# -- non-finite inputs: the same answer everywhere --------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_predict_evaluate_and_layer_calls_refuse_non_finite_inputs_as_fit_does(bad: float) -> None:
    m = _model()
    x, y = _data()
    x[3, 1, 0] = bad
    for call in (lambda: m.fit(x, y, 1), lambda: m.evaluate(x, y), lambda: m.predict(x),
                 lambda: m.predict(x, batch_size=3)):
        with pytest.raises(rk.InvalidInputError, match=r"x holds (nan|inf|-inf) at \(3, 1, 0\); expected"):
            call()
    yb = y.copy()
    yb[5, 1] = bad
    with pytest.raises(rk.InvalidInputError, match=r"evaluate: y holds .* at \(5, 1\)"):
        m.evaluate(_data()[0], yb)
    layer = m.layers[0]
    for call in (lambda: layer(x), lambda: layer.predict(x)):
        with pytest.raises(rk.InvalidInputError, match=r"LSTM: input holds .* at \(3, 1, 0\)"):
            call()
    # the raw pass checks nothing: NaN in, NaN out (documented on Layer.predict)
    with np.errstate(invalid="ignore", over="ignore"):
        out = layer.forward(x, rk.Ctx.inference())
    assert np.isfinite(np.delete(out, 3, axis=0)).all()
    assert np.isnan(out[3]).all() if np.isnan(bad) else out.shape == (8, 3)  # tanh may saturate an inf


# -- typed errors naming the argument ---------------------------------------------------------
def test_hostile_arguments_are_typed_and_named() -> None:
    m = _model()
    x, y = _data()
    with pytest.raises(rk.InvalidInputError, match=r"mask of input 0 must be a Mask or a boolean \(B, T\)"):
        m.predict(x, mask=[np.ones((8, 4), bool), None])
    with pytest.raises(rk.InvalidInputError, match=r"lengths of input 0 must be \(B,\) ints"):
        m.fit(x, y, 1, lengths=[1, None, 2, 2, 1, 1, 1, 1])
    with pytest.raises(rk.InvalidInputError, match="sample_weight must be an array of real numbers, got str"):
        m.evaluate(x, y, sample_weight="float16")
    with pytest.raises(rk.InvalidInputError, match="sample_weight holds NaN or Inf"):
        m.fit(x, y, 1, sample_weight=np.full(8, np.nan))
    with pytest.raises(rk.InvalidParameterError, match="callbacks must be a list of Callback .* got ndarray"):
        m.fit(x, y, 1, callbacks=np.array([rk.History()]))
    with pytest.raises(rk.InvalidParameterError, match=r"Dense \(Dense\): kernel_constraint=3 is refused"):
        rk.Dense(2, kernel_constraint=3)
    with pytest.raises(rk.InvalidParameterError, match=r"bias_regularizer='nope' is refused"):
        rk.Dense(2, bias_regularizer="nope")


# -- a tampered checkpoint ---------------------------------------------------------------------
def _tamper(ckpt: Path, edit: Any) -> None:
    path = ckpt / STATE_FILE
    tensors, meta = read_safetensors(path)
    state = json.loads(meta["fit_state"])
    tensors = {k: np.array(v) for k, v in tensors.items()}
    edit(state, tensors)
    write_safetensors(path, tensors, {**meta, "fit_state": json.dumps(state)})


def _set(key: str, value: Any) -> Any:
    return lambda st, _t: st.__setitem__(key, value)


def _neg_v(_st: dict[str, Any], t: dict[str, np.ndarray]) -> None:
    t["slot/1.kernel/v"] = -np.ones_like(t["slot/1.kernel/v"])


def _nan_weight(_st: dict[str, Any], t: dict[str, np.ndarray]) -> None:
    t["weight/0.kernel"] = np.full_like(t["weight/0.kernel"], np.nan)


def _wrong_shape(_st: dict[str, Any], t: dict[str, np.ndarray]) -> None:
    t["slot/1.kernel/m"] = np.zeros((7,), np.float32)


def _rng_inf(st: dict[str, Any], _t: dict[str, np.ndarray]) -> None:
    st["rng"]["has_uint32"] = float("-inf")


def _slot_edit(edit: Any) -> Any:
    return lambda _st, t: edit(t)


def _steps_edit(edit: Any) -> Any:
    return lambda st, _t: edit(st["steps"])


class _Kill(rk.models._callbacks.Callback):
    def on_epoch_begin(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        if epoch == 1:
            raise RuntimeError("killed")


@pytest.mark.parametrize(("edit", "field"), [
    (_set("epochs_done", -3), "epochs_done must be an int in \\[0, 3\\]"),
    (_set("epochs_done", 10**9), "epochs_done must be an int"),
    (_set("epochs_done", True), "epochs_done must be an int"),
    (_set("iterations", "x"), r"iterations must be an int in \[0, 9223372036854775807\]"),
    (_set("iterations", -1), r"iterations must be an int in \[0, "),
    (_set("learning_rate", -1.0), "learning_rate must be a finite number >= 0"),
    (_set("rng", {"bit_generator": "PCG64", "state": 3}), r"rng must be a PCG64 state \(the layout"),
    (_rng_inf, r"rng must be a PCG64 state"),
    (_set("unexpected", 1), "fit_state must be an object with the keys"),
    (_set("history", [1, 2]), "history must be"),
    (_set("history", {"loss": [1]}), r"history\['loss'\] must be a list of floats"),
    (_set("history", {"loss": [0.5, 0.4]}), r"history\['loss'\] must be a list of at most 1 floats"),
    (_set("history", {"loss": [True]}), r"history\['loss'\] must be a list of floats, got True"),
    (_set("history_epochs", [5]), r"history_epochs must be strictly increasing ints in \[0, 1\)"),
    (_set("stop_training", "no"), "stop_training must be true or false"),
    (_set("steps", {"9.nope": {"t": 1}}), "steps must be an object keyed by the model's weight names"),
    (_set("callbacks", {"0": {"n_arrays": 5}}), r"callbacks\[0\]\.n_arrays"),
    (_neg_v, r"tensor slot/1\.kernel/v must be numbers >= 0"),
    (_nan_weight, r"tensor weight/0\.kernel must be finite numbers"),
    (_wrong_shape, r"tensor slot/1\.kernel/m must be of shape \(3, 2\) and dtype float32, got 'shape \(7,\)"),
    (_slot_edit(lambda t: t.pop("slot/1.kernel/v")),
     r"the slots of 1\.kernel must be \['m', 'v'\] \(Adam\), got \['m'\]"),
    (_slot_edit(lambda t: t.__setitem__("slot/1.kernel/v", t["slot/1.kernel/v"].astype(np.float64))),
     r"tensor slot/1\.kernel/v must be of shape \(3, 2\) and dtype float32, got 'shape \(3, 2\), "
     r"dtype float64'"),
    (_steps_edit(lambda s: s["1.kernel"].pop("t")), r"steps\[1\.kernel\] must be \{\"t\""),
    (_steps_edit(lambda s: s["1.kernel"].__setitem__("lr", 1)), r"steps\[1\.kernel\] must be \{\"t\""),
    (_steps_edit(lambda s: s["1.kernel"].__setitem__("t", 3)),
     r"steps\[1\.kernel\]\.t must be an int in \[0, iterations = 2\]"),
    (_steps_edit(lambda s: s["1.kernel"].__setitem__("t", -1)), r"steps\[1\.kernel\]\.t must be an int"),
    (_steps_edit(lambda s: s.pop("1.kernel")),
     r"tensor slot/1\.kernel/m must be the slot of a weight listed in steps"),
])
def test_a_tampered_checkpoint_is_refused_before_anything_is_restored(tmp_path: Path, edit: Any,
                                                                       field: str) -> None:
    x, y = _data()
    ckpt = tmp_path / "ck"
    with pytest.raises(RuntimeError, match="killed"):  # 1 of 3 epochs done and saved
        _model().fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt, callbacks=[_Kill()])
    _tamper(ckpt, edit)
    m = _model()
    before = [w.copy() for w in m.get_weights()]
    with pytest.raises(rk.FileFormatError, match=f"damaged fit checkpoint: {field}"):
        m.fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt)
    for a, b in zip(m.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)   # nothing was restored
    assert m.optimizer.iterations == 0


@pytest.mark.parametrize(("field", "value", "error"), [("best", "x", "ValueError"),
                                                    ("wait", float("inf"), "OverflowError")])
def test_a_bad_callback_state_is_refused_before_the_model_changes(tmp_path: Path, field: str, value: Any,
                                                                  error: str) -> None:
    x, y = _data()
    ckpt = tmp_path / "ck"
    with pytest.raises(RuntimeError, match="killed"):
        _model().fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt,
                     callbacks=[rk.EarlyStopping(monitor="loss"), _Kill()])
    _tamper(ckpt, lambda st, _t: st["callbacks"]["0"].__setitem__(field, value))
    m = _model()
    before = [w.copy() for w in m.get_weights()]
    with pytest.raises(rk.FileFormatError, match=f"damaged fit checkpoint .{error}"):
        m.fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt, callbacks=[rk.EarlyStopping(monitor="loss")])
    for a, b in zip(m.get_weights(), before, strict=True):
        np.testing.assert_array_equal(a, b)
    assert m.optimizer.iterations == 0 and m.optimizer.get_state(m.layers[1], "kernel") == {}


def test_a_logged_nan_is_a_history_value_that_resumes(tmp_path: Path) -> None:
    """A loss can overflow with finite weights (a validation loss is not checked); a NaN/Inf a
    fit logged stays in the History it resumes."""
    x, y = _data()
    ckpt = tmp_path / "ck"
    with pytest.raises(RuntimeError, match="killed"):
        _model().fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt, callbacks=[_Kill()])
    _tamper(ckpt, lambda st, _t: st["history"].__setitem__("loss", [float("inf")]))
    h = _model().fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt)
    assert h.history["loss"][0] == float("inf") and np.isfinite(h.history["loss"][1:]).all()
    assert h.epoch == [0, 1, 2]


def test_the_slots_checked_are_the_optimizers_own(tmp_path: Path) -> None:
    """SGD without momentum keeps only ``t``: a momentum slot in its checkpoint is refused."""
    x, y = _data()

    def sgd() -> rk.Sequential:
        m = _model()
        m.compile(rk.SGD(0.01), "mse")
        return m
    ckpt = tmp_path / "ck"
    with pytest.raises(RuntimeError, match="killed"):
        sgd().fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt, callbacks=[_Kill()])
    _tamper(ckpt, lambda _st, t: t.__setitem__("slot/1.kernel/m", np.zeros((3, 2), np.float32)))
    with pytest.raises(rk.FileFormatError, match=r"the slots of 1\.kernel must be \[\] \(SGD\), got \['m'\]"):
        sgd().fit(x, y, 3, batch_size=4, seed=3, checkpoint=ckpt)


# -- one fit per layer at a time ---------------------------------------------------------------
class _Hold(rk.models._callbacks.Callback):
    """Blocks the first epoch's end until released (so a second fit runs meanwhile)."""

    def __init__(self) -> None:
        self.inside, self.release = threading.Event(), threading.Event()

    def on_epoch_end(self, epoch: int, logs: dict[str, float] | None = None) -> None:
        self.inside.set()
        assert self.release.wait(30)


@pytest.mark.parametrize("how", ["same model", "shared layer"])
def test_a_layer_trains_in_one_fit_at_a_time(how: str) -> None:
    shared = rk.LSTM(3, seed=1)
    a = rk.Sequential([shared, rk.Dense(2, seed=2)], input_shape=(None, 4, 2))
    b = a if how == "same model" else rk.Sequential([shared, rk.Dense(1, seed=3)], input_shape=(None, 4, 2))
    for m in (a, b):
        m.compile("sgd", "mse")
    x, y = _data()
    hold = _Hold()
    errors: list[BaseException] = []
    t = threading.Thread(target=lambda: a.fit(x, y, 1, callbacks=[hold]))
    t.start()
    try:
        assert hold.inside.wait(30)
        busy = r"\['LSTM', 'Dense'\]" if b is a else r"\['LSTM'\]"
        with pytest.raises(rk.ModelBusyError, match=rf"layer\(s\) {busy} of this model are already training"):
            b.fit(x, y[:, :1] if b is not a else y, 1)
    except BaseException as e:  # noqa: BLE001 - re-raised after the thread is released
        errors.append(e)
    finally:
        hold.release.set()
        t.join(30)
    if errors:
        raise errors[0]
    b.fit(x, y[:, :1] if b is not a else y, 1)  # free again once the first fit ended


def test_trainable_weights_leave_out_frozen_params_and_fit_does_not_move_them() -> None:
    from test_cells import ScaledElman

    m = rk.Sequential([rk.RecurrentLayer(ScaledElman(3), seed=2), rk.Dense(1, seed=3)],
                      input_shape=(None, 4, 2))
    m.compile(rk.SGD(0.5), "mse")
    names = [f"{m.layers.index(la)}.{n}" for la, n in m.trainable_weights()]
    assert names == ["0.V", "0.a", "1.kernel", "1.bias"]
    assert list(m.named_weights()) == ["0.V", "0.a", "0.frozen", "1.kernel", "1.bias"]
    assert len(m.get_weights()) == 5 and m.param_count() == 2 * 3 + 3 + 1 + 3 + 1
    before = m.get_weights()
    x, y = _data()
    m.fit(x.astype(np.float64), y[:, :1], 2)
    after = m.get_weights()
    np.testing.assert_array_equal(after[2], before[2])      # frozen: untouched
    assert all(not np.array_equal(a, b) for k, (a, b) in enumerate(zip(after, before, strict=True)) if k != 2)


def test_a_healthy_step_checks_no_layer_output_and_data_is_checked_once(
        monkeypatch: pytest.MonkeyPatch) -> None:

    calls = {"outputs": 0, "data": 0}
    real_check, real_first = seq_mod.check_finite, batch_mod.first_non_finite

    def counting_check(arr: np.ndarray, where: str) -> None:
        calls["outputs"] += 1
        real_check(arr, where)

    def counting_first(arrs: list[np.ndarray], what: str) -> None:
        calls["data"] += 1
        real_first(arrs, what)

    monkeypatch.setattr(seq_mod, "check_finite", counting_check)
    monkeypatch.setattr(batch_mod, "first_non_finite", counting_first)
    m = _model()
    x, y = _data()
    m.fit(x, y, 3, batch_size=2)        # 12 steps
    assert calls == {"outputs": 0, "data": 2}   # x and y at the door, nothing per step
    bad = _model()
    bad.layers[1].set_weight("kernel", np.full((3, 2), 3e38, np.float32))  # overflows in the step
    culprit = r"epoch 1/3 \(batch 1/4\).*first at the (input gradient|output) of layer 1 \(Dense\)"
    with pytest.raises(rk.NonFiniteError, match=culprit):
        bad.fit(x * 1e3, y, 3, batch_size=2)
    assert calls["outputs"] > 0             # only then are the outputs checked, to name the culprit
