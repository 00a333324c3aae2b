"""Inference on the compiled walker equals the NumPy reference (float32, the default
activations, whose steps take one pass per row) for every built-in cell with masks (both
semantics), ``proj_size``, ``go_backwards``, ``return_sequences``, Bidirectional and stateful
layers, at one row (the small-shape case) and at a batch split into blocks."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import kernels

pytest.importorskip("numba")

T, F, H = 9, 5, 6
TOL = 2e-5


def _layer(cell: str, **kw: Any) -> rk.RecurrentLayer:
    if cell == "rnn":
        return rk.SimpleRNN(H, seed=1, **kw)
    if cell == "lstm":
        return rk.LSTM(H, seed=2, **kw)
    if cell == "lstm_proj":
        return rk.LSTM(H, proj_size=3, seed=3, **kw)
    return rk.GRU(H, reset_after=(cell == "gru_ra"), seed=4, **kw)


def _mask(kind: str, B: int) -> dict[str, Any]:
    n = np.random.default_rng(B).integers(1, T + 1, B)
    n[0] = T
    if kind == "lengths":
        return {"lengths": n}
    if kind == "mask":
        return {"mask": np.arange(T)[None, :] < n[:, None]}
    return {}


def _run(layer: Any, x: np.ndarray, mask: dict[str, Any], mode: str, calls: int = 1) -> list[np.ndarray]:
    out = []
    with kernels.use(mode):
        if getattr(layer, "stateful", False):
            layer.reset_state()
        for _ in range(calls):
            ctx = rk.Ctx.inference()
            if mask:
                ctx.set_mask(**mask)
            got = layer.forward(x, ctx)
            out.extend(np.asarray(g) for g in (got if isinstance(got, list) else [got]))
    return out


def _same(fast: list[np.ndarray], ref: list[np.ndarray]) -> None:
    assert len(fast) == len(ref)
    for a, b in zip(fast, ref, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("B", [1, 19])
@pytest.mark.parametrize("mask", ["none", "mask", "lengths"])
@pytest.mark.parametrize("gb", [False, True], ids=["fwd", "bwd"])
@pytest.mark.parametrize("cell", ["rnn", "lstm", "lstm_proj", "gru", "gru_ra"])
def test_inference_equals_reference(cell: str, gb: bool, mask: str, B: int) -> None:
    x = np.random.default_rng(0).standard_normal((B, T, F)).astype(np.float32) * 2
    for rs in (False, True):
        layer = _layer(cell, return_sequences=rs, go_backwards=gb, return_state=True)
        layer.build((None, T, F))
        m = _mask(mask, B)
        _same(_run(layer, x, m, "fast"), _run(layer, x, m, "reference"))


@pytest.mark.parametrize("cell", ["rnn", "lstm", "lstm_proj", "gru", "gru_ra"])
def test_bidirectional_inference_equals_reference(cell: str) -> None:
    x = np.random.default_rng(1).standard_normal((3, T, F)).astype(np.float32)
    layer = rk.Bidirectional(_layer(cell, return_sequences=True))
    layer.build((None, T, F))
    for m in ({}, _mask("lengths", 3)):
        _same(_run(layer, x, m, "fast"), _run(layer, x, m, "reference"))


@pytest.mark.parametrize("B", [1, 19])
@pytest.mark.parametrize("cell", ["rnn", "lstm", "lstm_proj", "gru", "gru_ra"])
def test_stateful_inference_equals_reference(cell: str, B: int) -> None:
    x = np.random.default_rng(2).standard_normal((B, T, F)).astype(np.float32)
    layer = _layer(cell, stateful=True)
    layer.build((None, T, F))
    _same(_run(layer, x, {}, "fast", calls=3), _run(layer, x, {}, "reference", calls=3))


def test_small_shape_inference_equals_reference() -> None:
    """S1's shape, (1, 100, 16, 32), LSTM and GRU: 100 steps of the one-row path."""
    x = np.random.default_rng(3).standard_normal((1, 100, 16)).astype(np.float32)
    for layer in (rk.LSTM(32, seed=5), rk.GRU(32, seed=6)):
        layer.build((None, 100, 16))
        _same(_run(layer, x, {}, "fast"), _run(layer, x, {}, "reference"))


@pytest.mark.parametrize("units", [20, 32, 40, 72])
def test_one_row_product_over_every_panel_count_equals_reference(units: int) -> None:
    """One row's recurrent product spans 5, 8, 10 and 18 panels of 16 columns (LSTM: 4 units
    per column group): one call of up to ``ROW_PANELS`` panels, then the rest, partial panels
    included; the values equal the reference whatever the ISA's panel count."""
    x = np.random.default_rng(units).standard_normal((1, 12, 7)).astype(np.float32)
    for layer in (rk.LSTM(units, seed=7), rk.LSTM(units + 3, seed=8), rk.GRU(units, seed=9)):
        layer.build((None, 12, 7))
        _same(_run(layer, x, {}, "fast"), _run(layer, x, {}, "reference"))


def test_row_panels_follow_numbas_target(monkeypatch: pytest.MonkeyPatch) -> None:
    """The ISA rule: the features Numba compiles with decide (the host's unless
    ``NUMBA_CPU_FEATURES`` is given); an empty feature string leaves it to the CPU name."""
    from numba.core import config

    from rnnkit.kernels import _isa, _packed

    def avx512(name: str | None, feats: str | None) -> bool:
        monkeypatch.setattr(config, "CPU_NAME", name)
        monkeypatch.setattr(config, "CPU_FEATURES", feats)
        _isa.has_avx512.cache_clear()
        return _isa.has_avx512()

    try:
        assert avx512("haswell", "") is False
        assert avx512("skylake-avx512", "") is True
        assert avx512("znver4", "") is True
        assert avx512("haswell", "+avx2,+fma,-avx512f") is False
        assert avx512("haswell", "+avx2,+fma,+avx512f") is True
    finally:
        monkeypatch.undo()
        _isa.has_avx512.cache_clear()
    assert _packed.ROW_PANELS == (8 if _isa.has_avx512() else 6)
