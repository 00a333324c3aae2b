"""The forced-AVX2 run of the kernel-sensitive tests (``tools/avx2.sh python -m pytest -q -m isa``,
the second step of ``.ci/run``) runs AVX2 code, never the host's AVX-512 silently: rnnkit's
kernels compiled for AVX2 (no 512-bit register in the code Numba emits, the packed products'
6-row blocks, the int8 products' 16-output ``vpmaddwd`` tile), numpy's loops without their AVX-512
targets, OpenBLAS on its Haswell kernels and PyTorch on its AVX2 kernels. Under the native run a
child process checks that ``tools/avx2.sh`` sets all of that up."""

from __future__ import annotations

import ctypes
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import ISA_SENSITIVE
from rnnkit.kernels import _int8_gemm, _isa, _packed
from rnnkit.kernels._jit import njit

ROOT = Path(__file__).resolve().parent.parent
#: set by tools/avx2.sh: this process was started on the AVX2 path
FORCED = os.environ.get("RNNKIT_TEST_ISA") == "avx2"


def _numpy_avx512_targets() -> list[str]:
    """numpy's dispatch targets of AVX-512 that it would run on this CPU now."""
    try:
        umath = importlib.import_module("numpy._core._multiarray_umath")
    except ImportError:  # numpy 1.x
        umath = importlib.import_module("numpy.core._multiarray_umath")
    on = umath.__cpu_features__
    return [t for t in umath.__cpu_dispatch__ if ("AVX512" in t or t == "X86_V4") and on.get(t)]


def _openblas_cores() -> list[str]:
    """The kernel set (``openblas_get_corename``) of every OpenBLAS loaded in this process."""
    with open("/proc/self/maps") as fh:
        libs = sorted({ln.split()[-1] for ln in fh if "openblas" in ln.lower() and "/" in ln})
    cores = []
    for lib in libs:
        for name in ("openblas_get_corename", "scipy_openblas_get_corename64_", "openblas_get_corename64_"):
            try:
                fn = getattr(ctypes.CDLL(lib), name)
            except (OSError, AttributeError):
                continue
            fn.restype = ctypes.c_char_p
            cores.append(fn().decode())
            break
    return cores


def _saxpy(a: float, x: np.ndarray, y: np.ndarray) -> None:
    for i in range(x.shape[0]):
        y[i] += a * x[i]


@pytest.mark.skipif(not FORCED, reason="checks a process started by tools/avx2.sh (RNNKIT_TEST_ISA=avx2)")
def test_every_library_runs_its_avx2_path() -> None:
    # rnnkit's kernels: the blocking chosen for AVX2, and the code LLVM emits for Numba
    assert not _isa.has_avx512()
    assert (_packed.MR, _packed.ROW_PANELS, _packed.FULL_PANELS) == (6, 6, 1)
    assert (_int8_gemm.LAYOUT, _int8_gemm.NB, _int8_gemm.QDT, _int8_gemm.QMAX) == ("avx2", 16, np.uint8, 127)
    counts = _int8_gemm.assembly()
    assert counts["vpmaddwd"] > 0 and counts["vpdpbusd"] == 0, counts
    fresh = njit(error_model="numpy")(_saxpy)
    x = np.arange(64, dtype=np.float32)
    y = np.zeros(64, np.float32)
    fresh(np.float32(2.0), x, y)
    np.testing.assert_array_equal(y, 2 * x)
    asm = "\n".join(fresh.inspect_asm(sig) for sig in fresh.signatures)
    assert re.search(r"%ymm\d", asm), "the float32 loop was not vectorised on 256-bit registers"
    assert not re.search(r"%zmm\d", asm), "Numba emitted AVX-512 code"
    # numpy's own SIMD loops and its BLAS
    assert _numpy_avx512_targets() == []
    if sys.platform.startswith("linux"):
        cores = _openblas_cores()
        assert cores and all(c.lower() == "haswell" for c in cores), cores
    # the parity oracle
    try:
        import torch
    except ImportError:
        return
    assert torch.backends.cpu.get_cpu_capability() == "AVX2"


@pytest.mark.skipif(FORCED, reason="the forced run checks itself")
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="tools/avx2.sh is a bash script")
def test_the_avx2_script_forces_the_avx2_path() -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    env["PYTHON"] = sys.executable
    guard = f"{Path(__file__)}::test_every_library_runs_its_avx2_path"
    run = subprocess.run([str(ROOT / "tools" / "avx2.sh"), sys.executable, "-m", "pytest", "-q",
                          "-p", "no:cacheprovider", guard],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr


def test_every_file_of_the_isa_list_exists() -> None:
    """A renamed or removed test file may not drop out of the AVX2 run unnoticed."""
    tests = Path(__file__).resolve().parent
    assert sorted(n for n in ISA_SENSITIVE if not (tests / n).is_file()) == []
