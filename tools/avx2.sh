#!/usr/bin/env bash
# Run a command on the AVX2 code path of every library whose arithmetic rnnkit's numbers, or the
# tests' oracles, depend on, whatever the CPU (one with AVX-512 included):
#   Numba (rnnkit's compiled kernels)  NUMBA_CPU_NAME=haswell with NUMBA_CPU_FEATURES empty (the
#                                      name alone keeps the host's features, AVX-512 among them)
#   OpenBLAS (numpy's matmul)          OPENBLAS_CORETYPE=Haswell
#   numpy's own SIMD loops (exp, sums) NPY_DISABLE_CPU_FEATURES: every AVX-512 target numpy was
#                                      built to dispatch to (X86_V4 AVX512_ICL AVX512_SPR in numpy
#                                      2.4; AVX512F AVX512_SKX ... before), asked of numpy itself
#   PyTorch (the parity oracle)        ATEN_CPU_CAPABILITY=avx2 (its vectorized kernels),
#                                      ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2
# RNNKIT_TEST_ISA=avx2 makes tests/test_isa_path.py check that each took effect.
# onnxruntime picks its kernels from the CPU and has no such switch: it stays on the host's ISA.
# Usage: tools/avx2.sh python -m pytest -q -m isa   (PYTHON: the interpreter asked about numpy)
set -euo pipefail
export RNNKIT_TEST_ISA=avx2
export NUMBA_CPU_NAME=haswell NUMBA_CPU_FEATURES=
export OPENBLAS_CORETYPE=Haswell
NPY_DISABLE_CPU_FEATURES="$("${PYTHON:-python}" -c '
try:
    from numpy._core._multiarray_umath import __cpu_dispatch__ as targets
except ImportError:   # numpy 1.x
    from numpy.core._multiarray_umath import __cpu_dispatch__ as targets
print(" ".join(t for t in targets if "AVX512" in t or t == "X86_V4"))')"
export NPY_DISABLE_CPU_FEATURES
export ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 MKL_ENABLE_INSTRUCTIONS=AVX2
exec "$@"
