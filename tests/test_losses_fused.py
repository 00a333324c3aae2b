"""The fused softmax cross-entropy on logits: float64 finite differences, torch's
``F.cross_entropy`` on the same logits, float32 kept float32, blocks of rows that do not change
a value, weights folded into the gradient."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.losses import _xent


def _reference(z: np.ndarray, y: np.ndarray, w: np.ndarray | None) -> tuple[float, np.ndarray]:
    """Written out in float64 from the definition: v = -sum_c y_c log softmax(z)_c per row,
    loss = sum_p w_p v_p / P, and its gradient w.r.t. z."""
    z2 = z.reshape(-1, z.shape[-1]).astype(np.float64)
    y2 = y.reshape(z2.shape).astype(np.float64)
    e = np.exp(z2 - z2.max(axis=1, keepdims=True))
    soft = e / e.sum(axis=1, keepdims=True)
    v = -(y2 * np.log(soft)).sum(axis=1)
    P = z2.shape[0]
    ww = np.ones(P) if w is None else np.broadcast_to(w.reshape(w.shape[0], -1), z.shape[:-1]).reshape(-1)
    g = ww[:, None] * (soft * y2.sum(axis=1, keepdims=True) - y2) / P
    return float((ww * v).sum() / P), g.reshape(z.shape)


def _onehot(lab: np.ndarray, C: int) -> np.ndarray:
    return np.eye(C)[lab]


@pytest.mark.parametrize("weighted", [False, True])
def test_sparse_logits_match_finite_differences_over_several_blocks(weighted: bool) -> None:
    rng = np.random.default_rng(0)
    B, T, C = 3, 7, 3000         # 3000 float64 classes: 10 rows a block, 3 blocks
    assert _xent.block_rows(C, 8) < B * T
    z = 3.0 * rng.standard_normal((B, T, C))
    lab = rng.integers(0, C, (B, T))
    w = rng.uniform(0.2, 2.0, B) if weighted else None
    loss = rk.SparseCategoricalCrossentropy(from_logits=True)
    value, g = loss.value_and_grad(lab, z, w)
    ref_v, ref_g = _reference(z, _onehot(lab, C), w)
    assert g.dtype == np.float64
    np.testing.assert_allclose(value, ref_v, rtol=1e-12)
    np.testing.assert_allclose(g, ref_g, rtol=1e-9, atol=1e-15)
    h = 1e-6
    for k in range(6):
        idx = (k % B, (3 * k) % T, int(lab[k % B, (3 * k) % T]) if k % 2 else (977 * k) % C)
        zp, zm = z.copy(), z.copy()
        zp[idx] += h
        zm[idx] -= h
        fd = (loss(lab, zp, w) - loss(lab, zm, w)) / (2 * h)
        assert abs(fd - g[idx]) < 1e-8, (idx, fd, g[idx])


def test_onehot_and_soft_targets_match_finite_differences() -> None:
    rng = np.random.default_rng(1)
    z = rng.standard_normal((5, 4, 11))
    y = rng.uniform(0.0, 1.0, z.shape)       # soft, unnormalised targets: sum(y) enters
    w = rng.uniform(0.0, 1.5, (5, 4))        # one weight per position
    loss = rk.CategoricalCrossentropy(from_logits=True)
    value, g = loss.value_and_grad(y, z, w)
    ref_v, ref_g = _reference(z, y, w)
    np.testing.assert_allclose(value, ref_v, rtol=1e-12)
    h = 1e-6
    for idx in [(0, 0, 0), (4, 3, 10), (2, 1, 5)]:
        zp, zm = z.copy(), z.copy()
        zp[idx] += h
        zm[idx] -= h
        fd = (loss(y, zp, w) - loss(y, zm, w)) / (2 * h)
        assert abs(fd - g[idx]) < 1e-8
    np.testing.assert_allclose(g, ref_g, rtol=1e-9, atol=1e-15)


#: float32's unit roundoff (half its machine epsilon): one rounding errs by at most U32 relative
U32 = 2.0 ** -24


def numpy_sum_chain(n: int) -> int:
    """The most roundings one term of numpy's sum of ``n`` numbers passes through. numpy sums
    pairwise: a block of at most 128 numbers goes into 8 interleaved accumulators (at most 15
    additions each), the 8 are added as a tree (3), the block's last ``n % 8`` numbers one by one
    (at most 7); larger ranges are halved until they fit a block (``ceil(log2(n / 128))``
    levels, one addition each)."""
    return 15 + 3 + 7 + max(0, math.ceil(math.log2(n / 128)))


def torch_sum_chain(n: int) -> int:
    """The most roundings one term of torch's CPU row sum (``vec::map_reduce_all``, the one its
    log-softmax uses) of ``n`` floats passes through: one accumulator per vector lane, each adding
    its ``ceil(n / lanes)`` numbers in order (the tail included), then the lanes added as a tree
    (``log2(lanes)``). Lanes of float32: 16 with AVX-512, 8 with AVX2; any other build is taken
    as one lane, for which a sum in any order is the bound (``n - 1`` additions)."""
    cap = torch_capability()
    lanes = 16 if cap.startswith("AVX512") else 8 if cap == "AVX2" else 1
    return math.ceil(n / lanes) + int(math.log2(lanes))


def torch_capability() -> str:
    """The vector ISA torch's CPU kernels dispatched to (``AVX512``, ``AVX2``, ``DEFAULT`` ...)."""
    torch = pytest.importorskip("torch")
    return str(torch.backends.cpu.get_cpu_capability())


@pytest.mark.parametrize("sparse", [True, False])
def test_float32_logits_stay_float32_and_match_torch(sparse: bool) -> None:
    """rnnkit's float32 loss and gradient, and torch's ``F.cross_entropy`` on the same float32
    logits, each against the float64 evaluation of the definition, within a bound that follows
    from each one's float32 arithmetic (first order in U32 = 2^-24; the factor 1.001 covers the
    second-order terms and the float64 reference's own rounding, both below 1e-3 of the bound).

    Per row ``i``: ``x = z - m`` (``m`` the row's maximum), ``X = max |x|``, ``s = sum exp(x)``,
    ``L = log s``, ``p = exp(x) / s``, ``c = w / N`` (the gradient's factor), ``v`` the row's loss.

    rnnkit (:mod:`rnnkit.losses._xent`), in units of U32: ``z - m`` rounds once, which moves
    ``exp(x)`` by ``|x|`` relative; numpy's float32 ``exp`` is within 2.52 ulp (5.04); the pairwise
    sum adds ``numpy_sum_chain(C)`` roundings and the terms' own errors (at most ``X + 5.04``);
    ``c`` (rounded once to float32), ``c / s`` and the product round once each (3). So an entry
    errs by at most ``(|x| + 5.04 + S + X + 5.04 + 3) c p``, the label's entry ``2 c`` more (the
    subtracted float32 ``c`` and the final rounding). The loss of a row: ``log s`` inherits the
    sum's ``S + X + 5.04``, numpy's float32 ``log`` is within 3.83 ulp (``7.66 L``), ``z_l - m``
    (labels) or ``m + log s`` (targets) and the final subtraction round once (``|x_l| + |m| + L +
    v`` covers either); the weighted mean is float64.

    torch (its CPU log-softmax ``x - m - log(s)`` and backward ``g - exp(out) sum(g)``, Sleef's
    vector ``exp`` and ``log``, taken as within 2 ulp, 4 each): ``out`` errs absolutely by
    ``|x|`` (``x - m``), ``T + X + 4`` (the sum, ``T = torch_sum_chain(C)``, sequential per lane),
    ``4 L`` (the ``log``) and ``|x| + L`` (the subtraction); ``exp(out)`` adds 4, the factor
    ``c`` two roundings (``1 / N`` times ``w``) and the product one: an entry errs by at most
    ``(2 |x| + 5 L + T + X + 11) c p``, the label's entry ``3 c`` more. The loss of a row errs by
    ``|x_l| + T + X + 4 + 4 L + v``; the weighted sum of the N rows adds ``(N + 1)`` roundings of
    the total. With AVX2's 8 lanes ``T`` is 1,079 for 8,606 classes, with AVX-512's 16 lanes 542:
    torch's float32 gradient is further from the definition on AVX2, too far for a comparison
    of rnnkit with torch itself at 1e-6 of the largest entry, which is why each is held to the
    definition instead.
    """
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    rng = np.random.default_rng(2)
    N, C = 140, 8606
    z = (4.0 * rng.standard_normal((20, 7, C))).astype(np.float32)
    lab = rng.integers(0, C, (20, 7))
    w = rng.uniform(0.5, 1.5, 20).astype(np.float32)
    zt = torch.from_numpy(z.reshape(N, C).copy()).requires_grad_(True)
    target = torch.from_numpy(lab.reshape(-1)) if sparse else \
        torch.from_numpy(_onehot(lab, C).reshape(N, C).astype(np.float32))
    per = F.cross_entropy(zt, target, reduction="none")
    tl = (per * torch.from_numpy(np.repeat(w, 7))).sum() / N
    tl.backward()
    if sparse:
        value, g = rk.SparseCategoricalCrossentropy(from_logits=True).value_and_grad(lab, z, w)
    else:
        y = _onehot(lab, C).astype(np.float32)
        value, g = rk.CategoricalCrossentropy(from_logits=True).value_and_grad(y, z, w)
    assert g.dtype == np.float32 and g.shape == z.shape
    gt = zt.grad.numpy().reshape(z.shape)
    ref_v, ref_g = _reference(z, _onehot(lab, C), w.astype(np.float64))

    z2 = z.reshape(N, C).astype(np.float64)
    m = z2.max(axis=1)
    x = z2 - m[:, None]
    X = -x.min(axis=1)
    s = np.exp(x).sum(axis=1)
    L = np.log(s)
    p = np.exp(x) / s[:, None]
    c = np.repeat(w.astype(np.float64), 7) / N
    at = np.arange(N)
    lab1 = lab.reshape(-1)
    x_l = -x[at, lab1]
    v = L + x_l                                     # each row's loss, float64
    label = np.zeros((N, C))
    label[at, lab1] = 1.0

    S, T = numpy_sum_chain(C), torch_sum_chain(C)
    rk_g = U32 * (c[:, None] * p * (np.abs(x) + 5.04 + S + X[:, None] + 5.04 + 3) + 2 * c[:, None] * label)
    rk_v = U32 * np.sum(c * (S + X + 5.04 + 7.66 * L + x_l + np.abs(m) + L + v))
    t_g = U32 * (c[:, None] * p * (2 * np.abs(x) + 5 * L[:, None] + T + X[:, None] + 11)
                 + 3 * c[:, None] * label)
    t_v = U32 * (np.sum(c * (x_l + T + X + 4 + 4 * L + v)) + (N + 1) * ref_v)

    g2, gt2, ref2 = g.reshape(N, C), gt.reshape(N, C), ref_g.reshape(N, C)
    assert abs(value - ref_v) <= 1.001 * rk_v, (value, ref_v, rk_v)
    assert np.all(np.abs(g2 - ref2) <= 1.001 * rk_g), np.max(np.abs(g2 - ref2) / rk_g)
    assert abs(tl.item() - ref_v) <= 1.001 * t_v, (tl.item(), ref_v, t_v, torch_capability())
    assert np.all(np.abs(gt2 - ref2) <= 1.001 * t_g), (np.max(np.abs(gt2 - ref2) / t_g), torch_capability())


def test_float32_arithmetic_and_blocks_do_not_change_values() -> None:
    rng = np.random.default_rng(3)
    z = (3.0 * rng.standard_normal((50, 2000))).astype(np.float32)
    lab = rng.integers(0, 2000, 50)
    coef = np.full(50, 1 / 50, np.float32)
    out = np.empty_like(z)
    v = _xent.softmax_xent(z, lab, True, coef, out)        # the gradient lands in ``out``
    ref_v, ref_g = _reference(z, _onehot(lab, 2000), None)
    np.testing.assert_allclose(v.mean(), ref_v, rtol=1e-6)
    assert np.max(np.abs(out - ref_g)) <= 1e-6 * np.max(np.abs(ref_g))
    # one row at a time gives the same bits as the blocks
    one = np.empty_like(z)
    v1 = np.concatenate([_xent.softmax_xent(z[i:i + 1], lab[i:i + 1], True, coef[i:i + 1], one[i:i + 1])
                         for i in range(50)])
    np.testing.assert_array_equal(v1, v)
    np.testing.assert_array_equal(one, out)
    # the values alone (no gradient) are the same numbers
    np.testing.assert_array_equal(_xent.softmax_xent(z, lab, True, None, None), v)


def test_nonfinite_logit_gives_nonfinite_row_only() -> None:
    z = np.zeros((3, 4), np.float32)
    z[1, 2] = np.nan
    with np.errstate(invalid="ignore"):
        v, g = rk.SparseCategoricalCrossentropy(from_logits=True).value_and_grad(np.array([0, 1, 2]), z)
    assert np.isnan(v) and np.isnan(g[1]).all()
    np.testing.assert_allclose(g[0], (np.full(4, 0.25) - np.eye(4)[0]) / 3, rtol=1e-6)


def _softmax_model(loss: rk.Loss, activity: bool = False) -> rk.Sequential:
    kw: dict[str, Any] = {"activity_regularizer": rk.regularizers.L2(0.01)} if activity else {}
    model = rk.Sequential([rk.LSTM(6, return_sequences=True, seed=0, dtype="float64"),
                           rk.Dense(9, "softmax", seed=1, dtype="float64", **kw)])
    model.compile(optimizer=rk.optimizers.SGD(0.5), loss=loss)
    model.build((None, 4, 3))
    return model


@pytest.mark.parametrize("sparse", [True, False])
@pytest.mark.parametrize("weighted", [False, True])
def test_dense_softmax_then_crossentropy_step_equals_the_unfused_step(sparse: bool, weighted: bool) -> None:
    from rnnkit.models._objective import softmax_fusion

    rng = np.random.default_rng(5)
    x = rng.standard_normal((5, 4, 3))
    lab = rng.integers(0, 9, (5, 4))
    y = lab if sparse else _onehot(lab, 9)
    w = rng.uniform(0.5, 2.0, 5) if weighted else None
    loss = rk.SparseCategoricalCrossentropy() if sparse else rk.CategoricalCrossentropy()
    model = _softmax_model(loss)
    assert softmax_fusion(model)
    # the unfused step, by hand: the loss's gradient w.r.t. the softmax output, then backward
    ctx = rk.Ctx.training(0)
    p = model.forward(x, ctx)
    value, g = loss.value_and_grad(y, p, w)
    model.backward(g, ctx)
    dense = model.layers[-1]
    want = np.array(dense.weight("kernel")) - 0.5 * ctx.grad(dense, "kernel")
    want_lstm = np.array(model.layers[0].weight("kernel")) - 0.5 * ctx.grad(model.layers[0], "kernel")
    hist = model.fit(x, y, epochs=1, batch_size=5, shuffle=False, verbose=0, sample_weight=w)
    np.testing.assert_allclose(hist.history["loss"][0], value, rtol=1e-12)
    np.testing.assert_allclose(dense.weight("kernel"), want, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(model.layers[0].weight("kernel"), want_lstm, rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("sparse", [True, False])
def test_logits_gradient_through_a_clipped_softmax_matches_finite_differences(sparse: bool) -> None:
    rng = np.random.default_rng(6)
    a = 3.0 * rng.standard_normal((6, 5))
    a[0, 2] = -40.0                       # softmax ~1e-18 < 1e-7: the label's probability is clipped
    lab = rng.integers(0, 5, 6)
    lab[0] = 2
    y = lab if sparse else rng.uniform(0.0, 1.0, (6, 5))
    loss = rk.SparseCategoricalCrossentropy() if sparse else rk.CategoricalCrossentropy()

    def soft(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(axis=1, keepdims=True))
        return e / e.sum(axis=1, keepdims=True)

    value, ga = loss.value_and_logits_grad(y, soft(a))
    assert type(ga).__name__ == "LogitsGradient"
    np.testing.assert_allclose(value, loss(y, soft(a)), rtol=1e-13)
    # straight through the clip, as value_and_grad is: the unfused composition with softmax' vjp
    _, gp = loss.value_and_grad(y, soft(a))
    s = soft(a)
    np.testing.assert_allclose(np.asarray(ga), s * (gp - (gp * s).sum(axis=1, keepdims=True)),
                               rtol=1e-9, atol=1e-15)
    h = 1e-6
    for i, j in [(1, 0), (3, 4), (5, 2), (2, 1)]:      # rows nothing clips: the true derivative
        ap, am = a.copy(), a.copy()
        ap[i, j] += h
        am[i, j] -= h
        assert abs((loss(y, soft(ap)) - loss(y, soft(am))) / (2 * h) - ga[i, j]) < 1e-8


def test_no_fusion_where_the_gradient_must_be_the_outputs() -> None:
    from rnnkit.models._objective import softmax_fusion

    assert not softmax_fusion(_softmax_model(rk.SparseCategoricalCrossentropy(from_logits=True)))
    assert not softmax_fusion(_softmax_model(rk.MeanSquaredError()))
    assert not softmax_fusion(_softmax_model(rk.CategoricalCrossentropy(), activity=True))
    lin = rk.Sequential([rk.Dense(4, seed=0)])
    lin.compile(loss=rk.CategoricalCrossentropy())
    lin.build((None, 3))
    assert not softmax_fusion(lin)
