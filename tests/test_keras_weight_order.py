"""A functional model's weight list in Keras' order, against Keras 3 itself (torch backend).

The same graph is built with Keras and with rnnkit (two branches, a shared layer, two inputs,
two outputs, a diamond, an encoder-decoder); then the layer kinds of ``model.layers``, the
(layer kind, weight shape) of every entry of the weight lists, and the predictions after
``model.set_weights(keras_model.get_weights())`` are compared. Shapes that match by accident
would let a wrong order pass ``set_weights`` silently; the predictions catch it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")

# float32 forward passes of a few layers (<= 8 steps, widths <= 24) on O(1) values: each output
# is a sum of a few hundred float32 products, rounded differently by Keras' torch kernels and
# ours (relative error ~1e-7 per operation, a few hundred operations): 2e-5 absolute leaves a
# margin of ~10x over that, while a swapped weight moves outputs by ~1e-2 and more.
ATOL = 2e-5


@pytest.fixture(scope="module")
def keras() -> Any:
    return keras_or_skip()


def _two_branches(ns: Any, Input: Any, Model: Any) -> Any:
    """An encoder branch (GRU) and a second branch (SimpleRNN -> Dense) of one input, merged."""
    a = Input((5, 3))
    x = ns.GRU(4, reset_after=True)(a)
    y = ns.Dense(7)(ns.SimpleRNN(3)(a))
    return Model(a, ns.Dense(2)(ns.Concatenate()([x, y])))


def _encoder_decoder(ns: Any, Input: Any, Model: Any) -> Any:
    """The porter's case: encoder and decoder LSTMs of the same shapes (6 units, 3 features
    each), so a swapped order fits ``set_weights`` position by position and predicts wrong."""
    a, d = Input((5, 3)), Input((4, 3))
    _, h, c = ns.LSTM(6, return_state=True)(a)
    s = ns.LSTM(6, return_sequences=True)(d, initial_state=[h, c])
    return Model([a, d], ns.Dense(3)(s))


def _shared_two_inputs(ns: Any, Input: Any, Model: Any) -> Any:
    a, b = Input((5, 3)), Input((5, 3))
    shared, d = ns.LSTM(4), ns.Dense(4)
    return Model([a, b], ns.Dense(2)(ns.Add()([shared(a), d(shared(b))])))


def _two_outputs(ns: Any, Input: Any, Model: Any) -> Any:
    a = Input((5, 3))
    h = ns.GRU(5, return_sequences=True, reset_after=True)(a)
    return Model(a, [ns.Dense(1)(ns.GRU(2, reset_after=True)(h)), ns.Dense(3)(h)])


def _diamond(ns: Any, Input: Any, Model: Any) -> Any:
    a = Input((5, 3))
    h = ns.Dense(4)(a)
    return Model(a, ns.SimpleRNN(2)(ns.Add()([ns.Dense(4)(ns.Dense(6)(h)), ns.Dense(4)(h)])))


def _bidirectional_branches(ns: Any, Input: Any, Model: Any) -> Any:
    a = Input((5, 3))
    x = ns.Bidirectional(ns.LSTM(3))(a)
    y = ns.SimpleRNN(6)(a)
    return Model(a, ns.Dense(2)(ns.Concatenate()([y, x])))


def _nested(ns: Any, Input: Any, Model: Any) -> Any:
    """A nested model beside a layer of the same depth: Keras lists the nested model (its
    weights in its own order) as ONE operation at its depth, here after the GRU the walk meets
    first; its layers, placed one by one by depth, would come before the GRU."""
    a = Input((5, 3))
    inner = Model(a, ns.Dense(4)(ns.SimpleRNN(6)(a)))
    x = Input((5, 3))
    return Model(x, ns.Dense(2)(ns.Concatenate()([ns.GRU(2, reset_after=True)(x), inner(x)])))


def _nested_twice(ns: Any, Input: Any, Model: Any) -> Any:
    """One nested model called on two inputs (a shared operation), itself holding a nested
    model, beside a branch of another depth."""
    a = Input((5, 3))
    core = Model(a, ns.LSTM(3, return_sequences=True)(a))
    b = Input((5, 3))
    inner = Model(b, ns.SimpleRNN(4)(ns.Dense(3)(core(b))))
    x, y = Input((5, 3)), Input((5, 3))
    side = ns.GRU(4, reset_after=True)(ns.Dense(3)(y))
    return Model([x, y], ns.Dense(2)(ns.Add()([inner(x), side, inner(y)])))


GRAPHS: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
    "two_branches": (_two_branches, [(3, 5, 3)]),
    "encoder_decoder": (_encoder_decoder, [(3, 5, 3), (3, 4, 3)]),
    "shared_two_inputs": (_shared_two_inputs, [(3, 5, 3), (3, 5, 3)]),
    "two_outputs": (_two_outputs, [(3, 5, 3)]),
    "diamond": (_diamond, [(3, 5, 3)]),
    "bidirectional_branches": (_bidirectional_branches, [(3, 5, 3)]),
    "nested": (_nested, [(3, 5, 3)]),
    "nested_twice": (_nested_twice, [(3, 5, 3), (3, 5, 3)]),
}


def _keras_layers(kmodel: Any) -> list[Any]:
    """Keras' ``model.layers`` with a nested model replaced by its layers (its own order, its
    inputs left out), each layer once: what rnnkit's ``model.layers`` lists."""
    out: list[Any] = []
    for lay in kmodel.layers:
        nested = isinstance(lay, type(kmodel)) and lay is not kmodel
        for sub in ([s for s in _keras_layers(lay) if type(s).__name__ != "InputLayer"] if nested else [lay]):
            if all(sub is not o for o in out):
                out.append(sub)
    return out


def _entries(model: Any, keras_model: bool) -> list[tuple[str, tuple[int, ...]]]:
    """(layer kind, weight shape) of every weight in the model's list order. rnnkit keeps a
    recurrent layer's one-row bias as (1, G*H) where Keras has (G*H,): compared as Keras'."""
    if keras_model:
        return [(type(lay).__name__, tuple(w.shape)) for lay in _keras_layers(model) for w in lay.weights]
    return [(type(lay).__name__, tuple(lay.weight(n).shape[1:] if n.endswith("bias")
                                       and lay.weight(n).shape[0] == 1
                                       and isinstance(lay, (rk.RecurrentLayer, rk.Bidirectional))
                                       else lay.weight(n).shape))
            for lay, n in model.all_weights()]


@pytest.mark.parametrize("graph", list(GRAPHS))
def test_functional_weight_order_is_keras_order(keras: Any, graph: str) -> None:
    build, shapes = GRAPHS[graph]
    kmodel = build(keras.layers, keras.Input, keras.Model)
    model = build(rk, rk.Input, rk.Model)
    kinds = [type(lay).__name__ for lay in _keras_layers(kmodel)]
    assert [type(lay).__name__ for lay in model.layers] == kinds
    # Keras' weight list is its layers' weights, layer by layer, in model.layers order
    assert [id(w) for lay in kmodel.layers for w in lay.weights] == [id(w) for w in kmodel.weights]
    assert _entries(model, False) == _entries(kmodel, True)
    g = np.random.default_rng(sorted(GRAPHS).index(graph))
    for w in kmodel.weights:
        w.assign(g.normal(0.0, 0.5, tuple(w.shape)).astype("float32"))
    model.set_weights(kmodel.get_weights())
    xs = [g.normal(size=s).astype("float32") for s in shapes]
    arg = xs if len(xs) > 1 else xs[0]
    raw_want, raw_got = kmodel.predict(arg, verbose=0), model.predict(arg)
    assert type(raw_got) is type(raw_want)   # an array, or a list of them for several outputs
    want, got = _listed(raw_want), _listed(raw_got)
    assert len(want) == len(got) and [o.dtype for o in got] == [w_.dtype for w_ in want]
    for w_, o in zip(want, got, strict=True):
        np.testing.assert_allclose(o, w_, atol=ATOL)
    # and back: our list (each array in Keras' shape) set into Keras predicts the same
    kmodel.set_weights([np.reshape(a, tuple(k.shape))
                        for a, k in zip(model.get_weights(), kmodel.weights, strict=True)])
    for w_, o in zip(_listed(kmodel.predict(arg, verbose=0)), got, strict=True):
        np.testing.assert_allclose(o, w_, atol=ATOL)


def _listed(out: Any) -> list[np.ndarray]:
    return [np.asarray(o) for o in (out if isinstance(out, list) else [out])]


def test_set_weights_names_the_position_of_a_misfit() -> None:
    a = rk.Input((5, 3))
    model = rk.Model(a, rk.Dense(2, name="head")(rk.LSTM(4, name="enc")(a)))
    good = model.get_weights()   # enc: kernel (3, 16), recurrent_kernel (4, 16), bias (1, 16)
    bad = [*good]
    bad[3] = np.zeros((2, 4), "float32")   # head.kernel is (4, 2)
    with pytest.raises(rk.WeightShapeError) as e:
        model.set_weights(bad)
    msg = str(e.value)
    assert "position 3" in msg and "'kernel'" in msg and "head" in msg and "(4, 2)" in msg and "(2, 4)" in msg
    np.testing.assert_array_equal(model.get_weights()[3], good[3])   # nothing changed


def test_only_keras_one_row_bias_is_taken_in_another_shape() -> None:
    a = rk.Input((5, 3))
    model = rk.Model(a, rk.LSTM(4)(a))
    k, r, b = model.get_weights()
    model.set_weights([k, r, b.reshape(-1) + 1.0])   # Keras' (16,) bias: the row
    np.testing.assert_array_equal(model.get_weights()[2], b + 1.0)
    for wrong in (b.reshape(-1, 1), b.reshape(2, 8), b.reshape(-1)[:8]):
        with pytest.raises(rk.WeightShapeError, match="position 2"):
            model.set_weights([k, r, wrong])
    with pytest.raises(rk.WeightShapeError, match="position 0"):
        model.set_weights([k.reshape(-1), r, b])   # a kernel is never reshaped
    # a two-row bias (GRU reset_after=True, Keras' (2, 3H)) takes no (3H,) array
    g = rk.Input((5, 3))
    gm = rk.Model(g, rk.GRU(4, reset_after=True)(g))
    gk, gr, gb = gm.get_weights()
    with pytest.raises(rk.WeightShapeError, match="position 2"):
        gm.set_weights([gk, gr, gb[0]])


def test_a_nested_models_order_survives_the_model_file(tmp_path: Any) -> None:
    model = _nested_twice(rk, rk.Input, rk.Model)
    rk.save_model(model, str(tmp_path / "m.rnnkit"))
    back = rk.load_model(str(tmp_path / "m.rnnkit"))
    assert list(back.named_weights()) == list(model.named_weights())
    for a, b in zip(back.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
