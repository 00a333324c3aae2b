"""The shared layer harness: every layer with a forward/backward pass goes through it.

The checker itself is the public :mod:`rnnkit.testing` (its docstring lists the steps); this
module re-exports it for the tests, plus :func:`keras_or_skip` for the Keras-oracle tests::

    from harness import check_layer

    def test_dense_contract() -> None:
        check_layer(lambda dtype: Dense(4, "tanh", seed=3, dtype=dtype),
                    lambda rng: rng.standard_normal((2, 5)))
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from rnnkit.testing import (
    Grads,
    LayerReport,
    MakeInput,
    MakeLayer,
    Snapshot,
    analytic_grads,
    assert_fast_matches_reference,
    assert_gradcheck,
    assert_round_trip,
    assert_thread_safe,
    assert_unchanged,
    check_layer,
    gradcheck,
    numeric_grad,
    rel_err,
    snapshot,
)

__all__ = ["Grads", "LayerReport", "MakeInput", "MakeLayer", "Snapshot", "analytic_grads",
           "assert_fast_matches_reference", "assert_gradcheck", "assert_round_trip",
           "assert_thread_safe", "assert_unchanged", "check_layer", "gradcheck", "keras_or_skip",
           "numeric_grad", "rel_err", "snapshot"]


def keras_or_skip() -> Any:
    """Keras 3 on its torch backend (the oracle of the Keras-parity tests), or skip the test."""
    os.environ.setdefault("KERAS_BACKEND", "torch")
    keras = pytest.importorskip("keras")
    if keras.backend.backend() != "torch":  # pragma: no cover
        pytest.skip("Keras on its torch backend is the oracle here")
    return keras
