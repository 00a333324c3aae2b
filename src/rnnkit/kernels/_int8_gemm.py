"""The u8 x s8 -> int32 products of the int8 loops (:mod:`rnnkit.kernels._int8`).

On a CPU with AVX-512 VNNI the weights are packed in 64-output blocks of 4-byte groups and a
register-blocked tile (4 rows x 64 outputs, 16 accumulators) issues ``vpdpbusd`` (the
``llvm.x86.avx512.vpdpbusd.512`` intrinsic). Elsewhere the product is a plain int32
dot-product loop, which LLVM vectorises with ``vpmaddwd`` (AVX2) or ``vpdpwssd`` (AVX-512
VNNI). :data:`VNNI` says which; :func:`assembly` counts the instructions.
"""

from __future__ import annotations

import re
from typing import Any

import llvmlite.binding as llb
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils, config
from numba.extending import intrinsic

from rnnkit.kernels._jit import njit

#: compile options: on-disk cache, no fast-math
OPTS8: dict[str, Any] = {"cache": True, "error_model": "numpy", "nogil": True}


def _target_features() -> str:
    feats = getattr(config, "CPU_FEATURES", None)
    if feats is None or feats == "":
        if getattr(config, "CPU_NAME", None) not in (None, "", "host"):
            return ""
        return str(llb.get_host_cpu_features().flatten())
    return str(feats)


#: whether the compile target has AVX-512 VNNI (``vpdpbusd`` on 512-bit registers)
VNNI: bool = all(f"+{f}" in _target_features().split(",") for f in ("avx512vnni", "avx512bw", "avx512f"))
#: outputs per packed block and int8 inputs per group (the packing of :func:`pack`)
NB, KG = 64, 4


def padded(k: int) -> int:
    """The row width of quantized activations for ``k`` inputs (a multiple of 4)."""
    return (k + KG - 1) // KG * KG


def out_width(n: int) -> int:
    """The int32 accumulator width for ``n`` outputs (a multiple of 64 with VNNI)."""
    return (n + NB - 1) // NB * NB if VNNI else n


def pack(wq: np.ndarray) -> np.ndarray:
    """The (N, K) int8 weights in this CPU's product layout: zero-padded (N', K') and, with VNNI,
    blocked as [N'/64][K'/4][4][16][4] (output ``n = 64 b + 16 c + l``, input ``k = 4 g + t``)."""
    n, k = wq.shape
    w = np.zeros((out_width(n), padded(k)), np.int8)
    w[:n, :k] = wq
    if not VNNI:
        return w
    nb, kp = w.shape[0] // NB, w.shape[1]
    return np.ascontiguousarray(w.reshape(nb, 4, 16, kp // KG, KG).transpose(0, 3, 1, 2, 4))


def _tile(rows: int) -> Any:
    """An intrinsic: ``rows`` (1-4) activation rows x one packed 64-output block, via vpdpbusd."""

    @intrinsic
    def tile(typingctx: Any, xa: Any, xs: Any, wa: Any, k4: Any, oa: Any, ostr: Any) -> Any:
        sig = types.void(xa, xs, wa, k4, oa, ostr)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            xa_, xs_, wa_, k4_, oa_, os_ = args
            i32, i64 = ir.IntType(32), ir.IntType(64)
            v16 = ir.VectorType(i32, 16)
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(v16, [v16, v16, v16]), "llvm.x86.avx512.vpdpbusd.512")
            zero = ir.Constant(v16, [0] * 16)
            accs = [[cgutils.alloca_once_value(builder, zero) for _ in range(4)] for _ in range(rows)]
            undef = ir.Constant(v16, ir.Undefined)
            splat_mask = ir.Constant(v16, [0] * 16)
            with cgutils.for_range(builder, k4_) as loop:
                g = builder.zext(loop.index, i64) if loop.index.type != i64 else loop.index
                wbase = builder.add(wa_, builder.mul(g, ir.Constant(i64, 256)))
                ws = [builder.load(builder.inttoptr(builder.add(wbase, ir.Constant(i64, 64 * c)),
                                                    v16.as_pointer()), align=1) for c in range(4)]
                for r in range(rows):
                    xoff = builder.add(builder.mul(ir.Constant(i64, r), xs_),
                                       builder.mul(g, ir.Constant(i64, 4)))
                    xv = builder.load(builder.inttoptr(builder.add(xa_, xoff), i32.as_pointer()), align=1)
                    xb = builder.shuffle_vector(builder.insert_element(undef, xv, ir.Constant(i32, 0)),
                                                undef, splat_mask)
                    for c in range(4):
                        builder.store(builder.call(fn, [builder.load(accs[r][c]), xb, ws[c]]), accs[r][c])
            for r in range(rows):
                for c in range(4):
                    off = builder.add(builder.mul(ir.Constant(i64, r), os_), ir.Constant(i64, 64 * c))
                    builder.store(builder.load(accs[r][c]),
                                  builder.inttoptr(builder.add(oa_, off), v16.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return tile


_tile1, _tile2, _tile3, _tile4 = _tile(1), _tile(2), _tile(3), _tile(4)


@njit(**OPTS8)
def _gemm_vnni(q: Any, wp: Any, out: Any) -> None:
    """out (M, N') int32 = q (M, K') uint8 @ packed weights^T, no zero-point correction."""
    M, kp = q.shape
    nb, k4 = wp.shape[0], wp.shape[1]
    no = out.shape[1]
    qa, wa, oa = q.ctypes.data, wp.ctypes.data, out.ctypes.data
    for b in range(nb):
        wb = wa + b * k4 * 256
        m = 0
        while m + 4 <= M:
            _tile4(qa + m * kp, kp, wb, k4, oa + (m * no + b * NB) * 4, no * 4)
            m += 4
        rest = M - m
        if rest == 3:
            _tile3(qa + m * kp, kp, wb, k4, oa + (m * no + b * NB) * 4, no * 4)
        elif rest == 2:
            _tile2(qa + m * kp, kp, wb, k4, oa + (m * no + b * NB) * 4, no * 4)
        elif rest == 1:
            _tile1(qa + m * kp, kp, wb, k4, oa + (m * no + b * NB) * 4, no * 4)


@njit(**OPTS8)
def _gemm_plain(q: Any, w: Any, out: Any) -> None:
    """out (M, N) int32 = q (M, K') uint8 @ w (N, K') int8 ^T: int32 dot products."""
    M, kp = q.shape
    N = w.shape[0]
    for m in range(M):
        for n in range(N):
            acc = 0
            for k in range(kp):
                acc += np.int32(q[m, k]) * np.int32(w[n, k])
            out[m, n] = acc


gemm = _gemm_vnni if VNNI else _gemm_plain


def assembly() -> dict[str, int]:
    """How often each integer dot-product instruction occurs in the product :data:`gemm` as
    compiled for this machine (compiled afresh: Numba shows no assembly of cached code):
    ``vpdpbusd``, ``vpdpwssd``, ``vpmaddwd``, ``vpmaddubsw``."""
    fresh = njit(error_model="numpy")(gemm.py_func)
    fresh(np.zeros((5, 8), np.uint8), pack(np.zeros((3, 8), np.int8)), np.zeros((5, out_width(3)), np.int32))
    asm = "\n".join(fresh.inspect_asm(sig) for sig in fresh.signatures)
    names = ("vpdpbusd", "vpdpwssd", "vpmaddwd", "vpmaddubsw")
    return {ins: len(re.findall(rf"\b{ins}\b", asm)) for ins in names}


__all__ = ["KG", "NB", "OPTS8", "VNNI", "assembly", "gemm", "out_width", "pack", "padded"]
