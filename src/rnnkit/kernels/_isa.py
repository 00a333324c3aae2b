"""The vector ISA the kernels are compiled for, as Numba's code generator sees it.

Numba compiles for ``NUMBA_CPU_NAME`` (default: the host CPU) with the features
``NUMBA_CPU_FEATURES`` (default: the HOST's features, even when ``NUMBA_CPU_NAME`` names
another CPU; an empty string: the named CPU's own features). :func:`has_avx512` applies the same
rule, so a choice made from it (a register-blocking width, say) matches the code LLVM emits.
Numba's on-disk cache is keyed on the same CPU name and features, so a kernel compiled for one
ISA is never loaded for another.
"""

from __future__ import annotations

import functools

from rnnkit.kernels._numba_private import config, llvm

#: CPU names (LLVM's) whose own feature set includes AVX-512F
AVX512_CPUS = frozenset({
    "knl", "knm", "skylake-avx512", "skx", "cascadelake", "cooperlake", "cannonlake",
    "icelake-client", "icelake-server", "tigerlake", "rocketlake", "sapphirerapids",
    "emeraldrapids", "graniterapids", "graniterapids-d", "diamondrapids", "znver4", "znver5",
    "x86-64-v4"})


def _features() -> str:
    """The feature string Numba's JIT code generator uses (``+avx2,-avx512f,...``)."""
    feats = getattr(config, "CPU_FEATURES", None)
    return str(feats) if feats is not None else str(llvm.get_host_cpu_features().flatten())


def _cpu_name() -> str:
    name = getattr(config, "CPU_NAME", None)
    return str(name) if name is not None else str(llvm.get_host_cpu_name())


@functools.cache
def has_avx512() -> bool:
    """True when the kernels are compiled with AVX-512F (32 vector registers of 64 bytes)."""
    feats = [f.strip() for f in _features().split(",") if f.strip()]
    if feats:
        return "+avx512f" in feats
    return _cpu_name().lower() in AVX512_CPUS
