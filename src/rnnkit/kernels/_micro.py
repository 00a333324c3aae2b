"""The register-blocked micro-kernel of :mod:`._packed`, written in LLVM IR.

``micro(mr, nr, bits)`` is a numba intrinsic computing one ``mr x nr`` block of ``C``::

    C[r, j] = (C[r, j] if load else 0) + sum_k A[r, k] * P[k, j]     k = 0, 1, ..., K-1 in order

for ``r < mr`` and ``j < ncol`` (``ncol <= nr``; the other columns of the block are neither read
nor written). ``A`` is read at ``a + (r * ars + k * aks)`` elements (any strides: a row-major
block, or a transposed view), ``P`` is one packed panel: ``K`` rows of ``nr`` contiguous
elements. The ``mr`` accumulators are ``<nr x float>`` vectors that stay in registers through
the whole ``k`` loop (LLVM splits them into the target's vector registers: two ymm for 16 floats
under AVX2, one zmm under AVX-512); each step loads one panel row and broadcasts ``mr``
elements of ``A``. Every ``C`` element is one chain of fused multiply-adds in increasing ``k``,
so its value depends on its own row of ``A`` and column of ``P`` only, never on ``mr``, on the
block's position or on how a product is split between threads.

Why IR and not a numba loop: numba gives LLVM no aliasing guarantee between the arrays, so an
accumulator array written inside the ``k`` loop is stored and reloaded at every step (measured
35-40 GFLOP/s on one core here, against 105-115 for this kernel and 55-90 for OpenBLAS sgemm on
the per-step recurrent shapes).
"""

from __future__ import annotations

from typing import Any

from numba import types
from numba.extending import intrinsic

from rnnkit.kernels._numba_private import cgutils, ir

_I64 = ir.IntType(64)
_I32 = ir.IntType(32)
_I1 = ir.IntType(1)


def _i64(v: int) -> ir.Constant:
    return ir.Constant(_I64, v)


def _splat(builder: ir.IRBuilder, value: Any, vt: ir.VectorType) -> Any:
    """``<n x T>`` with every lane ``value``."""
    one = builder.insert_element(ir.Constant(vt, None), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(one, one, ir.Constant(ir.VectorType(_I32, vt.count), [0] * vt.count))


def _emit(builder: ir.IRBuilder, mr: int, nr: int, bits: int, npn: int, vals: list[Any]) -> None:
    """The code of one block (see :func:`micro`) at the builder's position, on the int64 values
    ``vals`` = (a, ars, aks, p, pst, c, ldc, K, load, ncol); the builder ends after it."""
    ft = ir.FloatType() if bits == 32 else ir.DoubleType()
    fp, vt, isz = ft.as_pointer(), ir.VectorType(ft, nr), bits // 8
    mt, lt = ir.VectorType(_I1, nr), ir.VectorType(_I64, nr)
    cells = [(r, q) for r in range(mr) for q in range(npn)]     # accumulator (row, panel) pairs
    a_i, ars, aks, p_i, pst, c_i, ldc, K, load, ncol = vals
    mod, fn, sfx = builder.module, builder.function, f"v{nr}f{bits}"
    fma = cgutils.get_or_insert_function(mod, ir.FunctionType(vt, [vt, vt, vt]), f"llvm.fmuladd.{sfx}")
    mload = cgutils.get_or_insert_function(
        mod, ir.FunctionType(vt, [fp, _I32, mt, vt]), f"llvm.masked.load.{sfx}.p0")
    mstore = cgutils.get_or_insert_function(
        mod, ir.FunctionType(ir.VoidType(), [vt, fp, _I32, mt]), f"llvm.masked.store.{sfx}.p0")
    a_p, p_p, c_p = (builder.inttoptr(v, fp) for v in (a_i, p_i, c_i))
    align, zero = ir.Constant(_I32, isz), ir.Constant(vt, [0.0] * nr)
    # lane j of panel q is live when q*nr + j < ncol
    live = _splat(builder, ncol, lt)
    masks = [builder.icmp_signed("<", ir.Constant(lt, [q * nr + j for j in range(nr)]), live)
             for q in range(npn)]
    pans = [builder.gep(p_p, [builder.mul(pst, _i64(q))]) for q in range(npn)]
    arows = [builder.gep(a_p, [builder.mul(_i64(r), ars)]) for r in range(mr)]
    crows = [builder.gep(c_p, [builder.add(builder.mul(_i64(r), ldc), _i64(q * nr))]) for r, q in cells]

    # 1. the accumulators start at C (load) or zero
    entry = builder.block
    with builder.if_then(builder.icmp_signed("!=", load, _i64(0))):
        loaded = [builder.call(mload, [crows[i], align, masks[q], zero])
                  for i, (_, q) in enumerate(cells)]
        bb_loaded = builder.block
    init = []
    for i in range(len(cells)):
        ph = builder.phi(vt)
        ph.add_incoming(loaded[i], bb_loaded)
        ph.add_incoming(zero, entry)
        init.append(ph)
    # 2. for k in 0..K-1: acc[r, q] = fma(A[r, k], P_q[k, :], acc[r, q])
    pre = builder.block
    head, body, done = (fn.append_basic_block(f"micro.{n}") for n in ("head", "body", "done"))
    builder.branch(head)
    builder.position_at_end(head)
    k = builder.phi(_I64)
    k.add_incoming(_i64(0), pre)
    acc = []
    for i in range(len(cells)):
        ph = builder.phi(vt)
        ph.add_incoming(init[i], pre)
        acc.append(ph)
    builder.cbranch(builder.icmp_signed("<", k, K), body, done)
    builder.position_at_end(body)
    prow = builder.mul(k, _i64(nr))
    bv = [builder.load(builder.bitcast(builder.gep(pans[q], [prow]), vt.as_pointer()), align=isz)
          for q in range(npn)]
    acol = builder.mul(k, aks)
    av = [_splat(builder, builder.load(builder.gep(arows[r], [acol])), vt) for r in range(mr)]
    new = [builder.call(fma, [av[r], bv[q], acc[i]]) for i, (r, q) in enumerate(cells)]
    k.add_incoming(builder.add(k, _i64(1)), builder.block)
    for i in range(len(cells)):
        acc[i].add_incoming(new[i], builder.block)
    builder.branch(head)
    # 3. the live lanes back to C
    builder.position_at_end(done)
    for i, (_, q) in enumerate(cells):
        builder.call(mstore, [acc[i], crows[i], align, masks[q]])


def _int64s(context: Any, builder: ir.IRBuilder, args: Any, tys: Any) -> list[Any]:
    return [context.cast(builder, v, t, types.int64) for v, t in zip(args, tys, strict=True)]


def micro(mr: int, nr: int, bits: int, npn: int = 1) -> Any:
    """The intrinsic ``(a, ars, aks, p, pst, c, ldc, K, load, ncol) -> None`` for one block size
    and float width (addresses as integers, strides and counts in elements). With ``npn > 1`` the
    block spans ``npn`` consecutive panels (``npn * nr`` columns, ``ncol`` of them live; panel
    ``q`` at ``p + q*pst``): more independent accumulators for few rows, whose single chain per
    panel would otherwise wait on the FMA latency."""

    def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> Any:
        _emit(builder, mr, nr, bits, npn, _int64s(context, builder, args, signature.args))
        return context.get_dummy_value()

    @intrinsic
    def kernel(typingctx: Any, a: Any, ars: Any, aks: Any, p: Any, pst: Any, c: Any, ldc: Any, K: Any,
               load: Any, ncol: Any) -> Any:
        return types.void(a, ars, aks, p, pst, c, ldc, K, load, ncol), codegen

    return kernel


def micro_switch(variants: list[tuple[int, int]], nrs: dict[int, int]) -> Any:
    """The intrinsic ``(P, mr, npn, a, ars, aks, p, pst, c, ldc, K, load, ncol) -> None``: the
    block of :func:`micro` ``(mr, nr, bits, npn)`` for the ``(mr, npn)`` of ``variants`` given at
    run time (``bits`` the float width of the array ``P``'s dtype, ``nr = nrs[bits]``; any other
    ``(mr, npn)`` does nothing). One switch over the variants in one intrinsic: the code of each
    is :func:`micro`'s, and Numba types one call instead of an ``if`` chain of calls (measured on
    an empty cache: about a second less compilation per process)."""

    def typer(typingctx: Any, P: Any, mr: Any, npn: Any, a: Any, ars: Any, aks: Any, p: Any, pst: Any,
              c: Any, ldc: Any, K: Any, load: Any, ncol: Any) -> Any:
        if not isinstance(P, types.Array) or P.dtype.bitwidth not in nrs:
            return None
        bits = P.dtype.bitwidth

        def codegen(context: Any, builder: ir.IRBuilder, signature: Any, args: Any) -> Any:
            vals = _int64s(context, builder, args[1:], signature.args[1:])
            fn = builder.function
            done = fn.append_basic_block("micro.switch.done")
            sw = builder.switch(builder.add(builder.mul(vals[0], _i64(64)), vals[1]), done)
            for m, q in variants:
                case = fn.append_basic_block(f"micro.case.{m}.{q}")
                sw.add_case(_i64(m * 64 + q), case)
                builder.position_at_end(case)
                _emit(builder, m, nrs[bits], bits, q, vals[2:])
                builder.branch(done)
            builder.position_at_end(done)
            return context.get_dummy_value()

        return types.void(P, mr, npn, a, ars, aks, p, pst, c, ldc, K, load, ncol), codegen

    return intrinsic(typer)
