"""Mask producers (Masking, Embedding(mask_zero)), mask rules of the per-step layers and merge
layers (Keras'), mask propagation in Sequential and graph models, and the merge layers' values
and float64 gradients."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from seq_helpers import model_gradcheck

RNG = np.random.default_rng(5)


class Probe(rk.Layer):
    """Records the mask it receives in ``ctx.mask`` (a test double; passes x through)."""

    supports_masking = True

    def __init__(self) -> None:
        super().__init__(dtype="float64")
        self.seen: list[Any] = []

    def _check_rebuild(self, shape: Any) -> None:
        pass

    def compute_output_shape(self, shape: Any) -> rk.Shape:
        return rk.Shape.of(shape)

    def forward(self, x: Any, ctx: rk.Ctx) -> np.ndarray:
        self.seen.append(ctx.mask)
        ctx.save(self, None)
        return np.asarray(x, np.float64)

    def backward(self, grad: Any, ctx: rk.Ctx) -> np.ndarray:
        ctx.load(self)
        return np.asarray(grad)


def _padded(B: int = 3, T: int = 5, F: int = 2) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.array([5, 2, 3][:B])
    x = RNG.standard_normal((B, T, F))
    valid = np.arange(T)[None, :] < lengths[:, None]
    return x * valid[..., None], valid


def test_masking_zeroes_masked_steps_and_marks_them() -> None:
    x, valid = _padded()
    x[0, 1] = 7.0                                      # all features 7 -> masked for mask_value 7
    m = rk.Masking(7.0, dtype="float64")
    ctx = rk.Ctx.training()
    y = m.forward(x, ctx)
    keep = np.any(x != 7.0, axis=-1)
    np.testing.assert_array_equal(y, x * keep[..., None])
    assert y[0, 1].tolist() == [0.0, 0.0]
    np.testing.assert_array_equal(m.compute_mask(x, None).valid(5), keep)
    g = RNG.standard_normal(x.shape)
    np.testing.assert_array_equal(m.backward(g, ctx), g * keep[..., None])
    with pytest.raises(rk.InvalidInputError, match="3D"):
        m.forward(x[:, 0], rk.Ctx.inference())
    with pytest.raises(rk.InvalidParameterError, match="mask_value"):
        rk.Masking("0")  # type: ignore[arg-type]


def test_embedding_mask_zero_marks_index_zero() -> None:
    e = rk.Embedding(6, 3, mask_zero=True, seed=1)
    ids = np.array([[3, 1, 0, 0], [2, 0, 5, 0]])
    e.build((None, None))
    np.testing.assert_array_equal(e.compute_mask(ids, None).valid(4), ids != 0)
    cfg = rk.layers.layer_to_config(e)
    assert rk.layers.layer_from_config(cfg).mask_zero is True
    with pytest.raises(rk.InvalidInputError, match="mask_zero"):
        e.compute_mask(np.array([1, 2]), None)
    both = e.compute_mask(ids, rk.Mask(lengths=np.array([1, 3])))
    np.testing.assert_array_equal(both.valid(4), [[1, 0, 0, 0], [1, 0, 1, 0]])
    # without mask_zero the lookup passes a model's lengths= on (it acts per step)
    plain = rk.Sequential([rk.Embedding(6, 3, seed=1, dtype="float64"),
                           rk.GRU(2, seed=2, dtype="float64")], input_shape=(None, None))
    got = plain.predict(ids, lengths=np.array([2, 3]))
    np.testing.assert_allclose(got[0], plain.predict(ids[:1, :2])[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], plain.predict(ids[1:, :3])[0], rtol=1e-12)


def test_reverse_flips_the_mask_and_concatenate_add_combine_as_keras() -> None:
    x, valid = _padded()
    rev = rk.Reverse(1).compute_mask(x, rk.Mask(lengths=valid.sum(1)))
    np.testing.assert_array_equal(rev.valid(5), valid[:, ::-1])
    assert rk.Reverse(-1).compute_mask(x, rk.Mask(valid)).valid(5) is not None
    a = rk.Mask(valid)
    b = rk.Mask(np.ones_like(valid) & (np.arange(5) < 1)[None, :])
    cat = rk.Concatenate(-1).compute_mask([x, x], [a, b])
    np.testing.assert_array_equal(cat.valid(5), valid | b.valid(5))      # Keras: any over the features
    np.testing.assert_array_equal(rk.Concatenate(-1).compute_mask([x, x], [a, None]).valid(5),
                                  np.ones_like(valid))                   # unmasked input: all valid
    np.testing.assert_array_equal(rk.Concatenate(1).compute_mask([x, x], [a, None]).valid(10),
                                  np.concatenate([valid, np.ones_like(valid)], 1))
    assert rk.Add().compute_mask([x, x], [a, None]) is None               # Keras: any None -> None
    np.testing.assert_array_equal(rk.Average().compute_mask([x, x], [a, b]).valid(5), valid | b.valid(5))
    same = rk.Multiply().compute_mask([x, x], [rk.Mask(lengths=np.array([1, 4, 2])),
                                               rk.Mask(lengths=np.array([3, 2, 2]))])
    assert same.kind == "lengths" and same.ends(5).tolist() == [3, 4, 2]
    with pytest.raises(rk.InvalidInputError, match="cannot take a masked input"):
        rk.RepeatVector(2).compute_mask(x[:, 0], a)


def test_sequential_propagates_masks_and_refuses_where_keras_does() -> None:
    x, valid = _padded()
    p1, p2 = Probe(), Probe()
    model = rk.Sequential([rk.Masking(dtype="float64"), p1, rk.Dense(3, dtype="float64", seed=1),
                           rk.Dropout(0.5, dtype="float64"), rk.Reverse(1, dtype="float64"), p2])
    ctx = rk.Ctx.inference()
    model.forward(x, ctx)
    np.testing.assert_array_equal(p1.seen[-1].valid(5), valid)
    np.testing.assert_array_equal(p2.seen[-1].valid(5), valid[:, ::-1])
    assert ctx.mask is None                                    # cleared after the pass
    model.predict(x, lengths=np.array([1, 1, 1]))               # Masking replaces the input's mask
    np.testing.assert_array_equal(p1.seen[-1].valid(5), valid)
    plain = rk.Sequential([Probe(), rk.Dense(2, dtype="float64")])
    plain.predict(x, lengths=np.array([5, 2, 3]))
    assert plain.layers[0].seen[-1].ends(5).tolist() == [5, 2, 3]
    bad = rk.Sequential([rk.Masking(), rk.Reverse(1), rk.layers.Dense(2)])
    bad.predict(x)                                              # fine: every layer takes the mask
    with pytest.raises(rk.InvalidInputError, match="cannot take a masked input"):
        rk.Sequential([rk.Masking(), rk.Dense(2), CantMask()]).predict(x)
    with pytest.raises(rk.InvalidInputError, match="lengths"):
        plain.predict(x, lengths=np.array([5, 2]))
    with pytest.raises(rk.InvalidInputError, match="exceeds"):
        plain.predict(x, lengths=np.array([6, 2, 1]))


class CantMask(rk.Layer):
    def compute_output_shape(self, shape: Any) -> rk.Shape:
        return rk.Shape.of(shape)

    def _check_rebuild(self, shape: Any) -> None:
        pass

    def forward(self, x: Any, ctx: rk.Ctx) -> np.ndarray:  # pragma: no cover - refused before
        return np.asarray(x)


def test_graph_propagates_masks_through_merges() -> None:
    x, valid = _padded()
    b = rk.GraphBuilder()
    inp = b.input((None, 5, 2))
    m = b.add(rk.Masking(dtype="float64"), inp)
    d1 = b.add(rk.Dense(2, dtype="float64", seed=1), m)
    d2 = b.add(rk.Dense(2, dtype="float64", seed=2), m)
    s = b.add(rk.Add(dtype="float64"), [d1, d2])
    p = Probe()
    out = b.add(p, s)
    model = b.build(out)
    outs, masks = model._forward_masks([x], rk.Ctx.inference(), False)
    np.testing.assert_array_equal(p.seen[-1].valid(5), valid)
    np.testing.assert_array_equal(masks[0].valid(5), valid)


@pytest.mark.parametrize("cls", [rk.Add, rk.Multiply, rk.Average])
def test_merge_layers_values_and_float64_gradients(cls: type) -> None:
    xs = [RNG.standard_normal((2, 3, 4)) for _ in range(3)]
    y = cls(dtype="float64").forward(xs, rk.Ctx.inference())
    want = {rk.Add: xs[0] + xs[1] + xs[2], rk.Multiply: xs[0] * xs[1] * xs[2],
            rk.Average: (xs[0] + xs[1] + xs[2]) / 3}[cls]
    np.testing.assert_allclose(y, want, rtol=1e-14)
    b = rk.GraphBuilder()
    ins = [b.input((None, 3, 4)) for _ in range(3)]
    h = [b.add(rk.Dense(4, "tanh", dtype="float64", seed=k), i) for k, i in enumerate(ins)]
    model = b.build(b.add(cls(dtype="float64"), h))
    errs = model_gradcheck(model, xs)
    assert max(errs.values()) < 1e-7, errs
    with pytest.raises(rk.InvalidInputError, match="one shape"):
        cls().forward([xs[0], xs[1][:, :2]], rk.Ctx.inference())
    with pytest.raises(rk.InvalidInputError, match="same shape"):
        cls().build([(None, 3, 4), (None, 3, 5)])


def test_saved_models_keep_masking_and_merge_layers(tmp_path: Any) -> None:
    x, valid = _padded()
    b = rk.GraphBuilder()
    inp = b.input((None, 5, 2))
    m = b.add(rk.Masking(), inp)
    d1 = b.add(rk.Dense(2, seed=1), m)
    out = b.add(rk.Multiply(), [d1, b.add(rk.Dense(2, seed=2), m)])
    model = b.build(out)
    model.save(str(tmp_path / "m.rnnkit"))
    again = rk.load_model(str(tmp_path / "m.rnnkit"))
    np.testing.assert_array_equal(again.predict(x), model.predict(x))


def test_fit_with_lengths_never_reads_the_padding_and_masks_each_input() -> None:
    """Mini-batches, shuffled: the padding's values change nothing, the lengths do."""
    x = RNG.standard_normal((6, 5, 2))
    n = np.array([5, 2, 3, 1, 4, 5])
    pad = np.arange(5)[None, :] >= n[:, None]
    y = RNG.standard_normal((6, 1))

    def trained(xs: np.ndarray, lengths: Any) -> list[np.ndarray]:
        m = rk.Sequential([rk.LSTM(3, seed=1, dtype="float64"), rk.Dense(1, seed=2, dtype="float64")],
                          input_shape=(None, 5, 2))
        m.compile(rk.SGD(0.1), "mse")
        m.fit(xs, y, 3, batch_size=4, seed=7, lengths=lengths)
        return m.get_weights()

    a, b = x.copy(), x.copy()
    a[pad], b[pad] = 0.0, 99.0
    wa, wb, wn = trained(a, n), trained(b, n), trained(a, None)
    for u, v in zip(wa, wb, strict=True):
        np.testing.assert_array_equal(u, v)
    assert any(not np.allclose(u, v) for u, v in zip(wa, wn, strict=True))
    # several inputs: one mask (or None) per input
    g = rk.GraphBuilder()
    i1, i2 = g.input((None, 5, 2)), g.input((None, 5, 2))
    p1, p2 = Probe(), Probe()
    model = g.build(g.add(rk.Add(dtype="float64"), [g.add(p1, i1), g.add(p2, i2)]))
    out = model.predict([a, b], lengths=[n, None])
    assert p1.seen[-1].ends(5).tolist() == n.tolist() and p2.seen[-1] is None
    np.testing.assert_array_equal(out, a + b)
    with pytest.raises(rk.InvalidInputError, match="one lengths per input"):
        model.predict([a, b], lengths=[n])


def test_masked_multiply_float64_gradients() -> None:
    xs = [RNG.standard_normal((3, 5, 2)) for _ in range(2)]
    masks = [rk.Mask(lengths=np.array([5, 2, 3])), rk.Mask(np.arange(5)[None, :].repeat(3, 0) % 2 == 0)]
    g = rk.GraphBuilder()
    ins = [g.input((None, 5, 2)) for _ in range(2)]
    h = [g.add(rk.Dense(2, "tanh", dtype="float64", seed=k), i) for k, i in enumerate(ins)]
    model = g.build(g.add(rk.Multiply(dtype="float64"), h))
    errs = model_gradcheck(model, xs, masks=masks)
    assert max(errs.values()) < 1e-7, errs
    y = model._forward_masks(xs, rk.Ctx.inference(), False, masks)[0][0]
    assert np.all(y[1, 2:][~masks[1].valid(5)[1, 2:]] == 0.0)   # masked in both: 0 (Keras)


def test_a_merge_call_on_arrays_takes_one_mask_per_input() -> None:
    """``rk.Multiply()([a, b], mask=[m1, m2])`` on arrays (and on the tape) is the masked product a
    graph model computes from the inputs' propagated masks (the list of masks had been read as
    one (2, B, T) mask and refused)."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4)), rng.standard_normal((2, 3, 4))
    m1 = np.array([[1, 1, 0], [1, 0, 0]], bool)
    m2 = np.array([[1, 0, 0], [1, 1, 1]], bool)
    x1, x2 = rk.Input((3, 4)), rk.Input((3, 4))
    graph = rk.Model([x1, x2], rk.Multiply(dtype="float64")([rk.Masking(0.0)(x1), rk.Masking(0.0)(x2)]))
    want = graph.predict([a * m1[..., None], b * m2[..., None]])
    layer = rk.Multiply(dtype="float64")
    np.testing.assert_allclose(layer([a * m1[..., None], b * m2[..., None]], mask=[m1, m2]), want, rtol=1e-6)
    with rk.GradientTape():
        taped = layer([a * m1[..., None], b * m2[..., None]], mask=[m1, m2])
    np.testing.assert_allclose(taped, want, rtol=1e-6)
    with pytest.raises(rk.InvalidInputError, match="one mask"):
        layer([a, b], mask=[m1, m2, m1])


# -- a mask that reaches a layer which cannot take one is refused when the model is built ------

def _refused_at_build(maker: str, taker: str) -> Any:
    return pytest.raises(rk.InvalidInputError,
                         match=f"{taker} .*cannot take a masked input.*made by {maker} ")


def test_sequential_build_refuses_a_mask_reaching_a_layer_without_masking() -> None:
    """Masking -> LSTM(return_sequences) -> Dense -> Flatten: the build names both layers (the
    masked call is never needed to find it), through ``build`` and through ``add`` after an Input."""
    def layers() -> list[rk.Layer]:
        return [rk.Masking(name="pad"), rk.LSTM(3, return_sequences=True), rk.Dense(2),
                rk.Flatten(name="flat")]
    with _refused_at_build("pad", "flat"):
        rk.Sequential(layers()).build((None, 5, 2))
    model = rk.Sequential([rk.Input((5, 2))])
    for layer in layers()[:3]:
        model.add(layer)
    with _refused_at_build("pad", "flat"):
        model.add(rk.Flatten(name="flat"))
    assert len(model.layers) == 3                                  # refused before it joined
    with _refused_at_build("emb", "conv"):
        rk.Sequential([rk.Embedding(9, 4, mask_zero=True, name="emb"), rk.GRU(3, return_sequences=True),
                       rk.Conv1D(2, 2, name="conv")]).build((None, 6))


def test_graph_build_refuses_a_mask_reaching_a_layer_without_masking() -> None:
    """The functional call and GraphBuilder.add refuse the node; output 0 of a return_state
    layer carries the mask on, its states do not."""
    inp = rk.Input((6,), dtype="int64")
    seq = rk.GRU(3, return_sequences=True)(rk.Embedding(9, 4, mask_zero=True, name="emb")(inp))
    with _refused_at_build("emb", "rep"):
        rk.RepeatVector(2, name="rep")(seq)
    b = rk.GraphBuilder()
    x = b.input((None, 5, 2))
    out, h, c = b.add(rk.LSTM(3, return_sequences=True, return_state=True), b.add(rk.Masking(name="pad"), x))
    b.add(rk.RepeatVector(2), h)                                    # a state: no mask
    with _refused_at_build("pad", "flat"):
        b.add(rk.Flatten(name="flat"), out)


def test_a_consumer_between_the_mask_and_the_layer_is_built_and_runs() -> None:
    """Masking -> LSTM (no return_sequences: it consumes the mask) -> RepeatVector builds, and
    each row is the LSTM's last output over that row's real steps, repeated (float64: the same
    arithmetic, so 1e-12)."""
    x, valid = _padded()
    lstm = rk.LSTM(3, dtype="float64", seed=4)
    model = rk.Sequential([rk.Masking(dtype="float64"), lstm, rk.RepeatVector(2, dtype="float64")])
    model.build((None, None, 2))
    got = model.predict(x)
    for b, n in enumerate(valid.sum(1)):
        want = lstm.predict(x[b:b + 1, :n])[0]
        np.testing.assert_allclose(got[b], np.stack([want, want]), rtol=1e-12, atol=1e-12)
