"""Products, shapes, joining, splitting and gathering, each with its vector-Jacobian product
beside its value. Names, arguments and dtypes are Keras 3's ``keras.ops``."""

from __future__ import annotations

import string
from collections.abc import Sequence
from typing import Any

import numpy as np

from rnnkit._errors import InvalidInputError
from rnnkit._numbers import check_int, show
from rnnkit.ops._core import as_array, done, grad_of, normalize_axis, one_axis, result_dtype

Needs = tuple[bool, ...]


def _pair(op: str, x1: Any, x2: Any) -> tuple[np.ndarray, np.ndarray]:
    a, b = as_array(x1, op, "x1"), as_array(x2, op, "x2")
    dt = result_dtype(a, b)
    return (a if a.dtype == dt else a.astype(dt)), (b if b.dtype == dt else b.astype(dt))


# -- products --------------------------------------------------------------------------------------
def matmul(x1: Any, x2: Any) -> np.ndarray:
    """The matrix product (NumPy's ``matmul``: 1-D operands are vectors, leading axes broadcast)."""
    a, b = _pair("matmul", x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        raise InvalidInputError(f"ops.matmul: expected operands of rank >= 1, got shapes {a.shape} and "
                                f"{b.shape} (use multiply for scalars)")
    k1 = a.shape[-1]
    k2 = b.shape[0] if b.ndim == 1 else b.shape[-2]
    if k1 != k2:
        raise InvalidInputError(f"ops.matmul: x1's last axis ({k1}, shape {a.shape}) must equal x2's "
                                f"{'only' if b.ndim == 1 else 'second-to-last'} axis ({k2}, shape {b.shape})")
    try:
        out = np.matmul(a, b)
    except ValueError:
        raise InvalidInputError(f"ops.matmul: the batch axes of x1 {a.shape} and x2 {b.shape} do not "
                                f"broadcast") from None

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = g.reshape(np.broadcast_shapes(a2.shape[:-2], b2.shape[:-2]) + (a2.shape[-2], b2.shape[-1]))
        da = db = None
        if needs[0]:
            da = grad_of(x1, _unb2(np.matmul(g2, np.swapaxes(b2, -1, -2)), a2.shape).reshape(a.shape))
        if needs[1]:
            db = grad_of(x2, _unb2(np.matmul(np.swapaxes(a2, -1, -2), g2), b2.shape).reshape(b.shape))
        return (da, db)
    return done(out, (x1, x2), back)


def _unb2(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = g.ndim - len(shape)
    if lead:
        g = g.sum(axis=tuple(range(lead)))
    axes = tuple(i for i, n in enumerate(shape[:-2]) if n == 1 and g.shape[i] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _tensordot_axes(op: str, a: np.ndarray, b: np.ndarray, axes: Any) -> tuple[list[int], list[int]]:
    if not isinstance(axes, (list, tuple)):
        n = check_int(axes, f"axes (for shapes {a.shape} and {b.shape})", f"ops.{op}", lo=0,
                      hi=min(a.ndim, b.ndim), error=InvalidInputError)
        return list(range(a.ndim - n, a.ndim)), list(range(n))
    if len(axes) != 2:
        raise InvalidInputError(f"ops.{op}: axes must be an int or a pair of axis lists, "
                                f"got {show(axes)}")
    ia = list(normalize_axis(axes[0], a.ndim, op) or ())
    ib = list(normalize_axis(axes[1], b.ndim, op) or ())
    if len(ia) != len(ib) or any(a.shape[i] != b.shape[j] for i, j in zip(ia, ib, strict=True)):
        raise InvalidInputError(f"ops.{op}: the contracted axes {ia} of x1 {a.shape} and {ib} of x2 "
                                f"{b.shape} must pair up with equal sizes")
    return ia, ib


def _tensordot(op: str, x1: Any, x2: Any, a: np.ndarray, b: np.ndarray, la: list[int],
               lb: list[int]) -> np.ndarray:
    if [a.shape[i] for i in la] != [b.shape[j] for j in lb]:
        raise InvalidInputError(f"ops.{op}: the summed axes of x1 {la} (sizes {[a.shape[i] for i in la]}) "
                                f"and of x2 {lb} (sizes {[b.shape[j] for j in lb]}) must have equal sizes")
    out = np.tensordot(a, b, axes=(la, lb))
    fa = [i for i in range(a.ndim) if i not in la]
    fb = [j for j in range(b.ndim) if j not in lb]

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        nfa = len(fa)
        da = db = None
        if needs[0]:
            t = np.tensordot(g, b, axes=(list(range(nfa, g.ndim)), fb))   # fa, then b's kept axes in order
            da = grad_of(x1, np.transpose(t, np.argsort(fa + [la[k] for k in np.argsort(lb)])))
        if needs[1]:
            t = np.tensordot(a, g, axes=(fa, list(range(nfa))))   # a's kept axes in order, then fb
            db = grad_of(x2, np.transpose(t, np.argsort([lb[k] for k in np.argsort(la)] + fb)))
        return (da, db)
    return done(out, (x1, x2), back)


def tensordot(x1: Any, x2: Any, axes: Any = 2) -> np.ndarray:
    """The sum of products over ``axes`` (an int: the last of x1 with the first of x2; or a pair
    of axis lists), NumPy's ``tensordot``."""
    a, b = _pair("tensordot", x1, x2)
    la, lb = _tensordot_axes("tensordot", a, b, axes)
    return _tensordot("tensordot", x1, x2, a, b, la, lb)


def dot(x1: Any, x2: Any) -> np.ndarray:
    """NumPy's ``dot``: a product of scalars, of vectors, of matrices; for N-D, the sum over
    x1's last axis and x2's second-to-last."""
    a, b = _pair("dot", x1, x2)
    if a.ndim == 0 or b.ndim == 0:
        la: list[int] = []
        lb: list[int] = []
    else:
        la, lb = [a.ndim - 1], [0 if b.ndim == 1 else b.ndim - 2]
        if a.shape[la[0]] != b.shape[lb[0]]:
            raise InvalidInputError(f"ops.dot: x1's last axis (shape {a.shape}) must equal x2's "
                                    f"{'only' if b.ndim == 1 else 'second-to-last'} axis (shape {b.shape})")
    return _tensordot("dot", x1, x2, a, b, la, lb)


def einsum(subscripts: str, *operands: Any, **kwargs: Any) -> np.ndarray:
    """NumPy's ``einsum`` (explicit ``->`` or implicit output; ``...`` for leading axes). The
    gradient of each operand is another einsum; an index repeated within one operand (a
    diagonal) has none and raises while a tape records."""
    if kwargs:
        raise InvalidInputError(f"ops.einsum: takes subscripts and operands only, got keywords "
                                f"{sorted(kwargs)}")
    if not isinstance(subscripts, str):
        raise InvalidInputError(f"ops.einsum: subscripts must be a str such as 'ij,jk->ik', got "
                                f"{subscripts!r}")
    arrs = [as_array(x, "einsum", f"operand {i}") for i, x in enumerate(operands)]
    dt = arrs[0].dtype if arrs else np.dtype("float32")
    for a in arrs[1:]:
        dt = result_dtype(np.empty(0, dt), a)
    arrs = [a if a.dtype == dt else a.astype(dt) for a in arrs]
    ins, out_spec = _einsum_specs(subscripts.replace(" ", ""), arrs)
    spec = ",".join(ins) + "->" + out_spec
    try:
        out = np.einsum(spec, *arrs)
    except ValueError as e:
        raise InvalidInputError(f"ops.einsum: {subscripts!r} does not fit the operands' shapes "
                                f"{[a.shape for a in arrs]} ({e})") from None

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        res: list[Any] = []
        for i, (s, a) in enumerate(zip(ins, arrs, strict=True)):
            if not needs[i]:
                res.append(None)
                continue
            if len(set(s)) != len(s):
                raise InvalidInputError(f"ops.einsum: no gradient for operand {i}: index repeated in "
                                        f"{s!r} (a diagonal)")
            others = [(t, b) for j, (t, b) in enumerate(zip(ins, arrs, strict=True)) if j != i]
            have = set(out_spec).union(*[set(t) for t, _ in others])
            keep = "".join(c for c in s if c in have)
            spec_i = ",".join([out_spec] + [t for t, _ in others]) + "->" + keep
            d = np.einsum(spec_i, g, *[b for _, b in others])
            full = d.reshape([a.shape[k] if c in have else 1 for k, c in enumerate(s)])
            res.append(grad_of(operands[i], np.broadcast_to(full, a.shape)))
        return res
    return done(out, tuple(operands), back)


def _einsum_specs(sub: str, arrs: list[np.ndarray]) -> tuple[list[str], str]:
    """The subscripts with ``...`` spelt out in letters, and the output's (NumPy's implicit
    rule when there is no ``->``)."""
    lhs, arrow, rhs = sub.partition("->")
    ins = lhs.split(",")
    if len(ins) != len(arrs):
        raise InvalidInputError(f"ops.einsum: {sub!r} names {len(ins)} operands, got {len(arrs)}")
    used = set(sub) - {".", ",", "-", ">"}
    free = [c for c in string.ascii_letters if c not in used]
    ell = 0
    for s, a in zip(ins, arrs, strict=True):
        if "..." in s:
            ell = max(ell, a.ndim - len(s.replace("...", "")))
    fill = "".join(free[:ell])
    out_ins = [s.replace("...", fill[ell - (a.ndim - len(s.replace("...", ""))):] if "..." in s else "")
               for s, a in zip(ins, arrs, strict=True)]
    if arrow:
        out = rhs.replace("...", fill)
    else:
        letters = "".join(out_ins)
        out = fill + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in fill))
    return out_ins, out


# -- shapes ----------------------------------------------------------------------------------------
def transpose(x: Any, axes: Any = None) -> np.ndarray:
    """``x`` with its axes permuted (reversed when ``axes`` is None)."""
    arr = as_array(x, "transpose")
    perm = (tuple(range(arr.ndim))[::-1] if axes is None
            else normalize_axis(axes, arr.ndim, "transpose"))
    assert perm is not None
    if len(perm) != arr.ndim:
        raise InvalidInputError(f"ops.transpose: axes must permute all {arr.ndim} axes of shape {arr.shape}, "
                                f"got {axes!r}")

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, np.transpose(g, np.argsort(perm))),)
    return done(np.transpose(arr, perm), (x,), back)


def _reshaped(op: str, x: Any, arr: np.ndarray, out: np.ndarray) -> np.ndarray:
    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return (grad_of(x, g.reshape(arr.shape)),)
    return done(out, (x,), back)


def reshape(x: Any, newshape: Any) -> np.ndarray:
    """``x`` with a new shape of as many elements (one axis may be -1)."""
    arr = as_array(x, "reshape")
    try:
        out = np.reshape(arr, newshape)
    except (ValueError, TypeError):
        raise InvalidInputError(f"ops.reshape: cannot give shape {newshape!r} to an array of shape "
                                f"{arr.shape} ({arr.size} elements)") from None
    return _reshaped("reshape", x, arr, out)


def expand_dims(x: Any, axis: Any) -> np.ndarray:
    """``x`` with a new axis of length 1 at ``axis`` (an int or a list / tuple of distinct ints,
    each in ``[-(ndim + n), ndim + n)`` for ``n`` new axes)."""
    arr = as_array(x, "expand_dims")
    n = len(axis) if isinstance(axis, (list, tuple)) else 1
    axes = normalize_axis(check_int(axis, "axis", "ops.expand_dims", error=InvalidInputError)
                          if axis is None else axis, arr.ndim + n, "expand_dims")
    assert axes is not None
    out = np.expand_dims(arr, axes)
    return _reshaped("expand_dims", x, arr, out)


def squeeze(x: Any, axis: Any = None) -> np.ndarray:
    """``x`` without its axes of length 1 (only ``axis``, when given, which must have length 1)."""
    arr = as_array(x, "squeeze")
    ax = normalize_axis(axis, arr.ndim, "squeeze")
    if ax is not None and any(arr.shape[a] != 1 for a in ax):
        raise InvalidInputError(f"ops.squeeze: axis {axis!r} of shape {arr.shape} must have length 1")
    return _reshaped("squeeze", x, arr, np.squeeze(arr, ax))


# -- joining and splitting -------------------------------------------------------------------------
def _many(op: str, xs: Any) -> list[np.ndarray]:
    if isinstance(xs, np.ndarray) or not isinstance(xs, (list, tuple)) or not xs:
        raise InvalidInputError(f"ops.{op}: expected a non-empty list of arrays, got {type(xs).__name__}")
    arrs = [as_array(x, op, f"xs[{i}]") for i, x in enumerate(xs)]
    dt = arrs[0].dtype
    for a in arrs[1:]:
        dt = result_dtype(np.empty(0, dt), a)
    return [a if a.dtype == dt else a.astype(dt) for a in arrs]


def concatenate(xs: Any, axis: int = 0) -> np.ndarray:
    """The arrays of ``xs`` joined along ``axis`` (equal sizes on every other axis)."""
    arrs = _many("concatenate", xs)
    ax = one_axis(axis, arrs[0].ndim, "concatenate", 0)
    ref = arrs[0].shape
    for i, a in enumerate(arrs):
        if a.ndim != len(ref) or any(a.shape[k] != ref[k] for k in range(a.ndim) if k != ax):
            raise InvalidInputError(f"ops.concatenate: xs[{i}] has shape {a.shape}; expected the shape of "
                                    f"xs[0] {ref} on every axis but {axis}")
    cuts = np.cumsum([a.shape[ax] for a in arrs])[:-1]

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        parts = np.split(g, cuts, axis=ax)
        return [grad_of(x, p) if n else None for x, p, n in zip(xs, parts, needs, strict=True)]
    return done(np.concatenate(arrs, axis=ax), tuple(xs), back)


def stack(x: Any, axis: int = 0) -> np.ndarray:
    """The arrays of ``x`` (one shape) stacked along a new ``axis``."""
    arrs = _many("stack", x)
    for i, a in enumerate(arrs):
        if a.shape != arrs[0].shape:
            raise InvalidInputError(f"ops.stack: x[{i}] has shape {a.shape}; expected every array of "
                                    f"the shape of x[0], {arrs[0].shape}")
    ax = one_axis(axis, arrs[0].ndim + 1, "stack", 0)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        return [grad_of(xi, np.take(g, i, axis=ax)) if n else None
                for i, (xi, n) in enumerate(zip(x, needs, strict=True))]
    return done(np.stack(arrs, axis=ax), tuple(x), back)


def split(x: Any, indices_or_sections: Any, axis: int = 0) -> list[np.ndarray]:
    """``x`` cut along ``axis`` into equal sections (an int) or at the given indices."""
    arr = as_array(x, "split")
    ax = one_axis(axis, arr.ndim, "split", 0)
    try:
        parts = np.split(arr, indices_or_sections, axis=ax)
    except ValueError:
        raise InvalidInputError(f"ops.split: axis {axis} of shape {arr.shape} does not split into "
                                f"{indices_or_sections!r} equal sections") from None

    def back(gs: list[Any], needs: Needs) -> Sequence[Any]:
        full = [np.zeros(p.shape, arr.dtype) if g is None else g for g, p in zip(gs, parts, strict=True)]
        return (grad_of(x, np.concatenate(full, axis=ax)),)
    return done(parts, (x,), back, multi=True)  # type: ignore[no-any-return]


# -- gathering -------------------------------------------------------------------------------------
def _indices(op: str, indices: Any) -> np.ndarray:
    idx = as_array(indices, op, "indices")
    if idx.dtype.kind not in "iu":
        raise InvalidInputError(f"ops.{op}: indices must be integers, got dtype {idx.dtype}")
    return idx


def take(x: Any, indices: Any, axis: Any = None) -> np.ndarray:
    """The elements of ``x`` at ``indices`` along ``axis`` (of the flattened ``x`` when None);
    negative indices count from the end. Repeated indices sum their gradients."""
    arr = as_array(x, "take")
    idx = _indices("take", indices)
    n = arr.size if axis is None else None
    ax = None
    if axis is not None:
        ax = one_axis(axis, arr.ndim, "take", 0)
        n = arr.shape[ax]
    assert n is not None
    if idx.size and (int(idx.max()) >= n or int(idx.min()) < -n):
        raise InvalidInputError(f"ops.take: indices must be in [{-n}, {n}) for axis {axis} of shape "
                                f"{arr.shape}, got values in [{int(idx.min())}, {int(idx.max())}]")
    out = np.take(arr, idx, axis=ax)

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        if ax is None:
            z = np.zeros(arr.size, g.dtype)
            np.add.at(z, idx, g)
            return (grad_of(x, z.reshape(arr.shape)), None)
        z = np.zeros((arr.shape[ax],) + arr.shape[:ax] + arr.shape[ax + 1:], g.dtype)
        gm = np.moveaxis(g, list(range(ax, ax + idx.ndim)), list(range(idx.ndim)))
        np.add.at(z, idx, gm)
        return (grad_of(x, np.moveaxis(z, 0, ax)), None)
    return done(out, (x, indices), back)


def take_along_axis(x: Any, indices: Any, axis: Any = None) -> np.ndarray:
    """NumPy's ``take_along_axis``: ``indices`` of ``x``'s rank picking along ``axis`` (the
    flattened ``x`` when None). Repeated indices sum their gradients."""
    arr = as_array(x, "take_along_axis")
    idx = _indices("take_along_axis", indices)
    base = arr.ravel() if axis is None else arr
    if axis is None:
        ax = 0
    else:
        ax = one_axis(axis, arr.ndim, "take_along_axis", 0)
    if idx.ndim != base.ndim:
        raise InvalidInputError(f"ops.take_along_axis: indices must have x's rank {base.ndim}, got shape "
                                f"{idx.shape}")
    n = base.shape[ax]
    if idx.size and (int(idx.max()) >= n or int(idx.min()) < -n):
        raise InvalidInputError(f"ops.take_along_axis: indices must be in [{-n}, {n}) along axis {axis} of "
                                f"shape {arr.shape}")
    try:
        out = np.take_along_axis(base, idx, axis=ax)
    except (ValueError, IndexError) as e:
        raise InvalidInputError(f"ops.take_along_axis: indices of shape {idx.shape} do not fit x of shape "
                                f"{arr.shape} along axis {axis} ({e})") from None

    def back(g: np.ndarray, needs: Needs) -> Sequence[Any]:
        shape = np.broadcast_shapes(idx.shape, tuple(1 if k == ax else s for k, s in enumerate(base.shape)))
        full = np.broadcast_to(idx, shape)
        grid = list(np.ix_(*[np.arange(s) for s in shape]))
        grid[ax] = full
        z = np.zeros(base.shape, g.dtype)
        np.add.at(z, tuple(grid), np.broadcast_to(g, shape))
        return (grad_of(x, z.reshape(arr.shape)), None)
    return done(out, (x, indices), back)
