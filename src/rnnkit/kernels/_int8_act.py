"""The constants of the int8 loops' activations (no numba needed: the NumPy reference,
:mod:`rnnkit.quant._reference`, and the compiled loops, :mod:`rnnkit.kernels._int8`, read them
from here).

tanh is a clamped odd rational of degree 5 over 4 in minimax form,

    ``tanh(x) ~ x p(y) / q(y)``, ``x`` clamped to [-C, C], ``y = x * x``,
    ``p(y) = (A1 + A3 y) + A5 y^2``, ``q(y) = (B0 + B2 y) + y^2``,

q's leading coefficient 1 (one multiply fewer). Its max abs error against float64 tanh is
1.76e-4 over all of float32 (1 - tanh(C) is part of it; beyond C the result stays at its value
at C, 0.99982): a twentieth of the half step of an int8 row spanning [-1, 1] (1 / 255 = 3.9e-3
with 8 bits, twice that with 7), with half the multiplies of the float32 path's clamped 13/6
rational and no saturation branch.

sigmoid is ``0.5 + 0.5 tanh(x / 2)`` with the halvings folded into the coefficients:
``0.5 + x ps(y) / qs(y)``, ``x`` clamped to [-2C, 2C], ``ps(y) = (4 A1 + A3 y) + (A5 / 4) y^2``,
``qs(y) = (16 B0 + 4 B2 y) + y^2`` (max abs error 8.8e-5: half of tanh's).
"""

from __future__ import annotations

import numpy as np

_F32 = np.float32

#: the float64 minimax fit of ``x (a1 + a3 y + a5 y^2) / (1 + b2 y + b4 y^2)`` on [0, 12]
#: (tanh beyond C counted), before q is made monic
_FIT = (9.99785111e-01, 1.12032835e-01, 9.87926244e-04, 4.45620477e-01, 1.58609641e-02)
_CLAMP64 = 4.32423953
_a1, _a3, _a5, _b2, _b4 = _FIT

#: tanh: the clamp and the coefficients (float32)
T_CLAMP = _F32(_CLAMP64)
T_A1, T_A3, T_A5 = _F32(_a1 / _b4), _F32(_a3 / _b4), _F32(_a5 / _b4)
T_B0, T_B2 = _F32(1.0 / _b4), _F32(_b2 / _b4)
#: sigmoid: the clamp and the coefficients (float32): tanh's at x / 2, times 1 / 2
S_CLAMP = _F32(2.0 * _CLAMP64)
S_A1, S_A3, S_A5 = _F32(4.0 * _a1 / _b4), _F32(_a3 / _b4), _F32(_a5 / _b4 / 4.0)
S_B0, S_B2 = _F32(16.0 / _b4), _F32(4.0 * _b2 / _b4)
#: the max abs errors against float64 tanh and sigmoid over every float32 (the tests assert them
#: over a dense sweep through the clamps)
TANH_ERROR, SIGMOID_ERROR = 1.76e-4, 8.8e-5

__all__ = ["SIGMOID_ERROR", "S_A1", "S_A3", "S_A5", "S_B0", "S_B2", "S_CLAMP", "TANH_ERROR", "T_A1",
           "T_A3", "T_A5", "T_B0", "T_B2", "T_CLAMP"]
