"""The backward's weight-gradient reductions compile no packing version of their own: the
gradient they pack is passed as the feed-forward products' read-only weights are, and the values
are those of float64 products."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

SRC = Path(__file__).resolve().parents[1] / "src"

REDUCTIONS = """
import json
import numpy as np
from numba import types
from rnnkit.kernels import _driver, _gemm, _packed
dt = np.float32
_driver.products(np.dtype(dt))                 # the feed-forward layers' products (read-only weights)
rng = np.random.default_rng(0)
TB, F, S, G = 37, 3, 5, 20
x2 = rng.standard_normal((TB, F)).astype(dt)
dxw2 = rng.standard_normal((TB, G)).astype(dt)
P1 = rng.standard_normal((TB, S)).astype(dt)
W = rng.standard_normal((F, G)).astype(dt); W.flags.writeable = False
dW, dU, db = np.empty((F, G), dt), np.empty((S, G), dt), np.empty((1, G), dt)
dx2 = np.empty((TB, F), dt)
_gemm.reductions(x2, dxw2, dxw2, True, P1, P1, G, W, dW, db, dU, dx2, 0, G, 0, TB)
sigs = sorted(" ".join(("w" if t.mutable else "r") if isinstance(t, types.Array) else "-" for t in s)
              for s in _packed.pack_into.signatures)
print(json.dumps({"sigs": sigs, "dW": dW.tolist(), "dU": dU.tolist(), "db": db.tolist(),
                  "dx": dx2.tolist(), "x": x2.tolist(), "g": dxw2.tolist(), "p": P1.tolist(),
                  "w": np.asarray(W).tolist()}))
"""


def test_the_reductions_pack_with_the_weights_version_and_give_float64_values(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC), "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", REDUCTIONS], env=env, capture_output=True, text=True,
                         timeout=600, check=True).stdout.strip().splitlines()[-1]
    r = json.loads(out)
    assert r["sigs"] == ["r - - - - - w"]       # one version: a read-only right-hand side
    x, g, p, w = (np.array(r[k], np.float64) for k in ("x", "g", "p", "w"))
    np.testing.assert_allclose(np.array(r["dW"]), x.T @ g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(r["dU"]), p.T @ g, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(r["db"])[0], g.sum(axis=0), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.array(r["dx"]), g @ w.T, rtol=1e-5, atol=1e-5)
