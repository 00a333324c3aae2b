"""The u8 x s8 -> int32 products of the int8 loops (:mod:`rnnkit.kernels._int8`).

- On a CPU with AVX-512 VNNI the weights are packed in 64-output blocks of 4-byte groups and a
  register-blocked tile (4 rows x 64 outputs, 16 accumulators) issues ``vpdpbusd`` (the
  ``llvm.x86.avx512.vpdpbusd.512`` intrinsic) on uint8 activations (0-255).
- With AVX2 (and no VNNI) the weights are packed in 16-output blocks of 4-byte groups and a tile
  of 4 rows x 16 outputs (8 accumulators) issues ``vpmaddubsw`` (``llvm.x86.avx2.pmadd.ub.sw``:
  uint8 x int8 products, summed in pairs into int16), ``vpmaddwd`` by ones (the two int16 pair
  sums of an int32 lane added, exact) and ``vpaddd``. ``vpmaddubsw`` saturates a pair sum at
  32767: the activations of this path are quantized to 7 bits (0-127, :data:`QMAX`), so a pair
  sum is at most 2 * 127 * 127 = 32258 and every product is exact.
- Elsewhere the product is a plain int32 dot-product loop over uint8 activations (0-255).

:data:`VNNI` and :data:`AVX2` say which; :data:`QMAX` is the activations' largest quantized value
and :data:`NB` the outputs of a packed block; :func:`assembly` counts the instructions.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from numba import types
from numba.extending import intrinsic, overload

from rnnkit.kernels._jit import njit
from rnnkit.kernels._numba_private import cgutils, config, ir
from rnnkit.kernels._numba_private import llvm as llb

#: compile options: on-disk cache, no fast-math
OPTS8: dict[str, Any] = {"cache": True, "error_model": "numpy", "nogil": True}


#: CPU names (``NUMBA_CPU_NAME``) whose LLVM defaults include AVX2, for a target named without
#: its features (such a target gets no VNNI tile; AVX2 where the name is listed here)
_AVX2_NAMES = frozenset({
    "haswell", "broadwell", "skylake", "skylake-avx512", "cascadelake", "cooperlake", "cannonlake",
    "icelake-client", "icelake-server", "tigerlake", "rocketlake", "alderlake", "raptorlake",
    "meteorlake", "sapphirerapids", "emeraldrapids", "graniterapids", "znver1", "znver2", "znver3",
    "znver4", "znver5", "x86-64-v3", "x86-64-v4"})


def _target_features() -> str:
    """The compile target's features as LLVM writes them (``+avx2,-avx512f,...``)."""
    feats = getattr(config, "CPU_FEATURES", None)
    if feats is None or feats == "":
        name = getattr(config, "CPU_NAME", None)
        if name not in (None, "", "host"):
            return "+avx2" if name in _AVX2_NAMES else ""
        return str(llb.get_host_cpu_features().flatten())
    return str(feats)


#: whether the compile target has AVX-512 VNNI (``vpdpbusd`` on 512-bit registers)
VNNI: bool = all(f"+{f}" in _target_features().split(",") for f in ("avx512vnni", "avx512bw", "avx512f"))
#: whether the products run the AVX2 tile (``vpmaddubsw`` on 7-bit activations; a CPU with AVX2
#: but no VNNI)
AVX2: bool = not VNNI and "+avx2" in _target_features().split(",")
#: outputs per packed block, and the padding of the activations' rows (the packing of :func:`pack`)
NB, KG = (64 if VNNI else 16), 4
#: the dtype of quantized activation rows
QDT: Any = np.uint8
#: the largest quantized activation: 127 for the AVX2 tile (``vpmaddubsw``'s int16 pair sums stay
#: exact), 255 elsewhere
QMAX: int = 127 if AVX2 else 255


def padded(k: int) -> int:
    """The row width of quantized activations for ``k`` inputs (a multiple of 4)."""
    return (k + KG - 1) // KG * KG


def out_width(n: int) -> int:
    """The int32 accumulator width for ``n`` outputs (a multiple of :data:`NB` with a tile)."""
    return (n + NB - 1) // NB * NB if VNNI or AVX2 else n


#: the product layout of this compile target: "vnni", "avx2" or "plain"
LAYOUT = "vnni" if VNNI else "avx2" if AVX2 else "plain"


def pack(wq: np.ndarray, layout: str = LAYOUT) -> np.ndarray:
    """The (N, K) int8 weights in a product layout (this CPU's by default), zero-padded to (N',
    K'): "vnni" int8 blocked as [N'/64][K'/4][4][16][4] (output ``n = 64 b + 16 c + l``, input
    ``k = 4 g + t``); "avx2" int8 blocked as [N'/16][K'/4][16][4] (``n = 16 b + l``, ``k = 4 g +
    t``; one dimension fewer: the compiled product tells the layouts apart by it); "plain" (N,
    K') int8."""
    n, k = wq.shape
    nb = {"vnni": 64, "avx2": 16, "plain": 1}[layout]
    w = np.zeros(((n + nb - 1) // nb * nb, padded(k)), np.int8)
    w[:n, :k] = wq
    blocks, kp = w.shape[0] // nb, w.shape[1]
    if layout == "vnni":
        return np.ascontiguousarray(w.reshape(blocks, 4, 16, kp // KG, KG).transpose(0, 3, 1, 2, 4))
    if layout == "avx2":
        return np.ascontiguousarray(w.reshape(blocks, 16, kp // KG, KG).transpose(0, 2, 1, 3))
    return w


def _vpdpbusd(builder: Any, acc: Any, x: Any, w: Any) -> Any:
    """``acc + dot4(x, w)`` per int32 lane: 4 uint8 x 4 int8 products (AVX-512 VNNI)."""
    v16 = acc.type
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(v16, [v16, v16, v16]),
                                        "llvm.x86.avx512.vpdpbusd.512")
    return builder.call(fn, [acc, x, w])


def _vpmaddubsw(builder: Any, acc: Any, x: Any, w: Any) -> Any:
    """``acc + dot4(x, w)`` per int32 lane (AVX2): ``vpmaddubsw`` (4 uint8 x 4 int8 products,
    summed in pairs into int16: exact for activations <= 127), ``vpmaddwd`` by ones (the two
    pair sums into int32), ``vpaddd``."""
    b32, h16 = ir.VectorType(ir.IntType(8), 32), ir.VectorType(ir.IntType(16), 16)
    ubsw = cgutils.get_or_insert_function(builder.module, ir.FunctionType(h16, [b32, b32]),
                                          "llvm.x86.avx2.pmadd.ub.sw")
    wd = cgutils.get_or_insert_function(builder.module, ir.FunctionType(acc.type, [h16, h16]),
                                        "llvm.x86.avx2.pmadd.wd")
    pairs = builder.call(ubsw, [builder.bitcast(x, b32), builder.bitcast(w, b32)])
    return builder.add(acc, builder.call(wd, [pairs, ir.Constant(h16, [1] * 16)]))


def _tile(rows: int, lanes: int, vecs: int, mac: Any) -> Any:
    """An intrinsic ``tile(xa, xs, wa, groups, oa, os)``: ``rows`` (1-4) activation rows (at
    address ``xa``, ``xs`` bytes apart) x one packed block of ``vecs`` vectors of ``lanes`` int32
    outputs (at ``wa``), over ``groups`` groups of 4 activation bytes; ``out`` rows at ``oa``,
    ``os`` bytes apart. Each group broadcasts a row's 4 bytes to every lane and issues ``mac``
    with each of the group's weight vectors into ``rows * vecs`` accumulators."""

    @intrinsic
    def tile(typingctx: Any, xa: Any, xs: Any, wa: Any, groups: Any, oa: Any, ostr: Any) -> Any:
        sig = types.void(xa, xs, wa, groups, oa, ostr)

        def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
            xa_, xs_, wa_, groups_, oa_, os_ = args
            i32, i64 = ir.IntType(32), ir.IntType(64)
            vec = ir.VectorType(i32, lanes)
            vbytes = 4 * lanes
            accs = [[cgutils.alloca_once_value(builder, ir.Constant(vec, [0] * lanes)) for _ in range(vecs)]
                    for _ in range(rows)]
            undef = ir.Constant(vec, ir.Undefined)
            splat = ir.Constant(vec, [0] * lanes)
            with cgutils.for_range(builder, groups_) as loop:
                g = builder.zext(loop.index, i64) if loop.index.type != i64 else loop.index
                wbase = builder.add(wa_, builder.mul(g, ir.Constant(i64, vecs * vbytes)))
                ws = [builder.load(builder.inttoptr(builder.add(wbase, ir.Constant(i64, vbytes * c)),
                                                    vec.as_pointer()), align=1) for c in range(vecs)]
                for r in range(rows):
                    xoff = builder.add(builder.mul(ir.Constant(i64, r), xs_),
                                       builder.mul(g, ir.Constant(i64, 4)))
                    xv = builder.load(builder.inttoptr(builder.add(xa_, xoff), i32.as_pointer()), align=1)
                    xb = builder.shuffle_vector(builder.insert_element(undef, xv, ir.Constant(i32, 0)),
                                                undef, splat)
                    for c in range(vecs):
                        builder.store(mac(builder, builder.load(accs[r][c]), xb, ws[c]), accs[r][c])
            for r in range(rows):
                for c in range(vecs):
                    off = builder.add(builder.mul(ir.Constant(i64, r), os_), ir.Constant(i64, vbytes * c))
                    builder.store(builder.load(accs[r][c]),
                                  builder.inttoptr(builder.add(oa_, off), vec.as_pointer()), align=1)
            return context.get_dummy_value()

        return sig, codegen

    return tile


#: VNNI: 4 rows x 64 outputs (16 accumulators), a group = 4 inputs (4 x 64 B of weights)
_tile1, _tile2, _tile3, _tile4 = (_tile(r, 16, 4, _vpdpbusd) for r in (1, 2, 3, 4))
#: AVX2: 4 rows x 16 outputs (8 accumulators), a group = 4 inputs (2 x 32 B of weights)
_w1, _w2, _w3, _w4 = (_tile(r, 8, 2, _vpmaddubsw) for r in (1, 2, 3, 4))


def _tiles(wp: Any, rows: int, xa: int, xs: int, wa: int, groups: int, oa: int,
           ostr: int) -> None:  # pragma: no cover - replaced by the overload inside kernels
    """The tile of ``rows`` (1-4) rows for the packing ``wp``: a compile-time stand-in (its
    arguments are raw addresses), called only by compiled kernels."""
    raise TypeError("_tiles works on raw addresses inside compiled kernels; call gemm()")


@overload(_tiles)
def _tiles_ov(wp: Any, rows: Any, xa: Any, xs: Any, wa: Any, groups: Any, oa: Any, ostr: Any) -> Any:
    """The VNNI tiles for the 5-dimensional "vnni" packing, the AVX2 tiles for the 4-dimensional
    "avx2" one, chosen while typing (only the chosen family is compiled: a CPU without AVX-512
    cannot select ``vpdpbusd``)."""
    if wp.ndim == 5:
        t1, t2, t3, t4 = _tile1, _tile2, _tile3, _tile4
    elif wp.ndim == 4:
        t1, t2, t3, t4 = _w1, _w2, _w3, _w4
    else:
        return None

    def impl(wp: Any, rows: Any, xa: Any, xs: Any, wa: Any, groups: Any, oa: Any, ostr: Any) -> None:
        if rows == 4:
            t4(xa, xs, wa, groups, oa, ostr)
        elif rows == 3:
            t3(xa, xs, wa, groups, oa, ostr)
        elif rows == 2:
            t2(xa, xs, wa, groups, oa, ostr)
        else:
            t1(xa, xs, wa, groups, oa, ostr)
    return impl


@njit(**OPTS8)
def _gemm_tiled(q: Any, wp: Any, out: Any) -> None:
    """out (M, N') int32 = q (M, K') uint8 @ the packed weights^T, no zero-point correction:
    the "vnni" or the "avx2" packing (:func:`pack`; rows of at most 127 for "avx2"), tiles of 4
    rows x one block. The block's outputs and a group's bytes follow from the packing's shape
    ([blocks][groups][outputs...][inputs])."""
    M, kp = q.shape
    nb, groups = wp.shape[0], wp.shape[1]
    width = wp.shape[2] * wp.shape[3] if wp.ndim == 5 else wp.shape[2]
    gbytes = width * KG
    xs, no = kp, out.shape[1]
    qa, wa, oa = q.ctypes.data, wp.ctypes.data, out.ctypes.data
    for b in range(nb):
        wb = wa + b * groups * gbytes
        for m in range(0, M, 4):
            _tiles(wp, min(4, M - m), qa + m * xs, xs, wb, groups, oa + (m * no + b * width) * 4, no * 4)


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


gemm = _gemm_tiled if VNNI or AVX2 else _gemm_plain


def assembly() -> dict[str, int]:
    """How often each integer dot-product instruction occurs in the product :data:`gemm` as
    compiled for this machine (compiled afresh: Numba shows no assembly of cached code):
    ``vpdpbusd``, ``vpdpwssd``, ``vpmaddwd``, ``vpmaddubsw``."""
    fresh = njit(error_model="numpy")(gemm.py_func)
    fresh(np.zeros((5, 8), QDT), pack(np.zeros((3, 8), np.int8)), np.zeros((5, out_width(3)), np.int32))
    asm = "\n".join(fresh.inspect_asm(sig) for sig in fresh.signatures)
    names = ("vpdpbusd", "vpdpwssd", "vpmaddwd", "vpmaddubsw")
    return {ins: len(re.findall(rf"\b{ins}\b", asm)) for ins in names}


__all__ = ["AVX2", "KG", "LAYOUT", "NB", "OPTS8", "QDT", "QMAX", "VNNI", "assembly", "gemm", "out_width",
           "pack", "padded"]
