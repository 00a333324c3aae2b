"""What a first run compiles: the garbage collector paused during compilation, one version of a
helper per argument layout (never one per literal value)."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"


def test_the_collector_is_off_while_numba_compiles_and_on_again_after() -> None:
    numba = pytest.importorskip("numba")
    from numba.core import event

    from rnnkit.kernels import _gcpause, _jit  # noqa: F401  (_jit installs the pause)

    seen: list[bool] = []

    class Probe(event.Listener):
        def on_start(self, ev: Any) -> None:
            seen.append(gc.isenabled())

        def on_end(self, ev: Any) -> None:
            pass

    def twice(x: float) -> float:
        return 2.0 * x

    assert gc.isenabled()
    with event.install_listener("numba:compile", Probe()):
        assert numba.njit(twice)(1.5) == 3.0
    assert seen == [False]            # off during the compilation
    assert gc.isenabled() and not _gcpause.paused()


def test_a_collector_the_program_turned_off_stays_off() -> None:
    numba = pytest.importorskip("numba")
    from rnnkit.kernels import _jit  # noqa: F401

    def thrice(x: float) -> float:
        return 3.0 * x

    gc.disable()
    try:
        assert numba.njit(thrice)(2.0) == 6.0
        assert not gc.isenabled()
    finally:
        gc.enable()


PRODUCTS = """
import numpy as np
from numba import types
from rnnkit.kernels import _packed
A = np.ones((5, 7), np.float32)
W = np.ones((7, 9), np.float32); W.flags.writeable = False
G = np.ones((5, 9), np.float32)
_packed.pack(W)                                                  # pack_cols: a literal 0 inside
_packed.gemm(G, W, True, np.empty((5, 7), np.float32), False, 0, 7)
_packed.gemm(A.T, G, False, np.empty((7, 9), np.float32), False, 0, 9)
_packed.gemm2(A.T, np.empty((7, 9), np.float32), A.T, np.empty((7, 9), np.float32), G, 0, 9)  # literal False
for sig in _packed.pack_into.signatures:
    print(" ".join("L" if isinstance(t, types.Literal) else ("w" if t.mutable else "r")
                   if isinstance(t, types.Array) else "-" for t in sig))
"""


def test_the_packing_helper_has_one_version_per_layout_not_per_literal(tmp_path: Path) -> None:
    pytest.importorskip("numba")
    env = {**os.environ, "PYTHONPATH": str(SRC), "NUMBA_CACHE_DIR": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", PRODUCTS], env=env, capture_output=True, text=True,
                         timeout=600, check=True).stdout.split("\n")
    versions = sorted(line for line in out if line)
    # one version with a read-only weight, one with a writable array; no literal argument
    assert versions == ["r - - - - - w", "w - - - - - w"]
