"""What a compiled step is written with: the built-in steps' compile options and row helpers.

Importing this module imports numba. ``@jit`` compiles a step function the way the built-in
steps are compiled (NumPy's error model so that loops vectorise, FMA contraction). The helpers
work on 2D arrays with contiguous rows (what a step receives):

- ``row(a, b)``: row ``b`` of ``a`` as a contiguous 1D array (loops over it vectorise);
- ``sig(x)``, ``fast_tanh(x)``, ``act(x, code)``: scalars, in the array's precision (float32
  uses a rational tanh, max abs error 2.6e-7, exactly +-1 where float32 tanh rounds to +-1);
  ``dgate(y, code)``: the derivative of activation ``code`` from its output ``y``;
- ``act_cols(src, dst, code)`` / ``act_ip(a, code)`` / ``dact_cols(y, g, code)``: the same
  over 2D views (``g = act'(y) * g`` in place); ``copy_rows(src, dst)``, ``zero_rows(a)``;
- ``cst(x, v)``: the constant ``v`` in the precision of ``x``.

Activation codes: :data:`rnnkit.kernels.ACTIVATION_CODES` (tanh 0, sigmoid 1, relu 2, linear 3,
hard_sigmoid 4); :func:`rnnkit.kernels.activation_code` maps a cell's activation to its code.
"""

from __future__ import annotations

from typing import Any

from rnnkit.kernels._jit import (
    OPTS,
    act,
    act_cols,
    act_ip,
    copy_rows,
    cst,
    dact_cols,
    dgate,
    fast_tanh,
    njit,
    row,
    sig,
)
from rnnkit.kernels._walk import _zero_rows as zero_rows


def jit(fn: Any) -> Any:
    """Compile a step function (``numba.njit`` with the built-in steps' options, without an
    on-disk cache of its own: the walker that calls it is cached, keyed on its source)."""
    return njit(**{k: v for k, v in OPTS.items() if k != "cache"})(fn)


__all__ = ["OPTS", "act", "act_cols", "act_ip", "copy_rows", "cst", "dact_cols", "dgate", "fast_tanh", "jit",
           "row", "sig", "zero_rows"]
