"""Score attention layers, Keras 3's: ``Attention`` (Luong, dot-product or ``"concat"``) and
``AdditiveAttention`` (Bahdanau).

Both take a LIST of inputs ``[query, value]`` or ``[query, value, key]`` (``key`` defaults to
``value``): query (B, Tq, D), value (B, Tv, Dv), key (B, Tv, D), and give (B, Tq, Dv)::

    scores  = score(query, key)                         (B, Tq, Tv)
    scores  = scores - 1e9        where the step is masked (value mask, causal mask)
    weights = softmax(scores, axis=-1)                  dropout on weights (training only)
    output  = weights @ value, 0 at the masked query steps

Masks (Keras' rules): ``mask=[query_mask, value_mask]`` (each a boolean (B, T) array, a
:class:`~rnnkit.Mask` or None); the output carries the query's mask. ``use_causal_mask=True``
keeps query step ``i`` from attending to value steps ``j > i``. ``return_attention_scores=True``
makes the layer give two outputs, ``[output, weights]`` (the weights after dropout, as Keras).
In Keras both are call arguments; here they are the layer's configuration (one call form for
every caller: arrays, graph nodes, the tape), and the Keras readers move them across.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, MethodNotImplementedError
from rnnkit._initializers import glorot_uniform
from rnnkit._layer import check_bool
from rnnkit._mask import Mask
from rnnkit._numbers import check_float
from rnnkit._random import make_rng
from rnnkit._shape import Shape
from rnnkit.layers._merge import MergeLayer

#: what a masked score loses before the softmax (Keras' 1e9 outside float16)
MASK_SHIFT = 1.0e9


def query_value_key(shapes: Any, name: str) -> list[Shape]:
    """The shapes of an attention layer's ``[query, value]`` or ``[query, value, key]``, each
    (batch, timesteps, features) with a known feature width, or InvalidInputError naming ``name``
    and the input."""
    if isinstance(shapes, Shape) or not isinstance(shapes, (list, tuple)) or not 2 <= len(shapes) <= 3 \
            or not all(isinstance(s, (Shape, list, tuple)) for s in shapes):
        raise InvalidInputError(f"{name}: expected the shapes of [query, value] or [query, value, key], "
                                f"got {shapes!r}")
    out = [Shape.of(s) for s in shapes]
    for nm, s in zip(("query", "value", "key"), out, strict=False):
        if s.rank != 3 or s[-1] is None:
            raise InvalidInputError(f"{name}: {nm} must be (batch, timesteps, features) with a known "
                                    f"feature width, got {s}")
    return out


def split_scores_grad(layer: Any, grad: Any, out_shape: tuple[int, ...],
                      scores_shape: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray | None]:
    """An attention layer's backward gradient as ``(d output, d scores or None)``: with
    ``return_attention_scores`` the list ``[d output, d scores]`` (either None: zeros / no
    gradient), else the output's gradient alone; each checked against its shape."""
    if not layer.return_attention_scores:
        return layer._as_grad(grad, out_shape), None
    if not isinstance(grad, (list, tuple)) or len(grad) != 2:
        raise InvalidInputError(f"{layer.name}: backward expected [d output, d scores] (the layer "
                                f"returns its attention scores), got {type(grad).__name__}")
    g_out = np.zeros(out_shape, layer.dtype) if grad[0] is None else layer._as_grad(grad[0], out_shape)
    return g_out, None if grad[1] is None else layer._as_grad(grad[1], scores_shape)


def check_dropout(rate: Any, where: str) -> float:
    """``rate`` as a float in [0, 1), or InvalidParameterError naming ``dropout``."""
    return check_float(rate, "dropout", where, lo=0.0, hi=1.0, hi_open=True)


def as_masks(mask: Any, n_inputs: int, where: str) -> list[Mask | None]:
    """Keras' ``mask=[query_mask, value_mask(, key_mask)]`` as Masks (None: every step real);
    InvalidInputError for anything else (a single mask is refused: which input would it mark?)."""
    if mask is None:
        return [None] * n_inputs
    if not isinstance(mask, (list, tuple)) or not 2 <= len(mask) <= 3:
        raise InvalidInputError(f"{where}: mask must be a list [query_mask, value_mask] (each a boolean "
                                f"(batch, timesteps) array or None), got {mask!r}")
    out = [Mask.of(m) for m in mask]
    return (out + [None] * n_inputs)[:max(n_inputs, len(out))]


def _check_mask(m: Mask | None, what: str, B: int, T: int, where: str) -> np.ndarray | None:
    """The (B, T) boolean array of ``m`` (None for None), or InvalidInputError naming ``what``."""
    if m is None:
        return None
    try:
        m.check(B, T, f"{where}: {what}")
    except InvalidInputError:
        raise InvalidInputError(f"{where}: {what} must fit (batch, timesteps) = {(B, T)}, "
                                f"got {m!r}") from None
    return m.valid(T)


def softmax_last(s: np.ndarray) -> np.ndarray:
    """Softmax over the last axis (the largest score subtracted first; ``fmax.reduce`` finds it
    several times faster than ``max`` over a short last axis, and a NaN score makes its row NaN
    either way)."""
    e = s - np.fmax.reduce(s, axis=-1, keepdims=True)
    np.exp(e, out=e)
    e /= e.sum(axis=-1, keepdims=True)
    return e


def score_mask(v_valid: np.ndarray | None, causal: bool, B: int, Tq: int, Tv: int) -> np.ndarray | None:
    """Where a score is kept ((B or 1, Tq or 1, Tv) booleans), or None when all are: the value
    mask AND (``causal``) ``j <= i``."""
    keep = None if v_valid is None else v_valid[:, None, :]
    if causal:
        tri = (np.arange(Tq)[:, None] >= np.arange(Tv)[None, :])[None]
        keep = tri if keep is None else keep & tri
    return keep


class _ScoreAttention(MergeLayer):
    """What ``Attention`` and ``AdditiveAttention`` share: inputs, masks, softmax, dropout, the
    weighted sum and its backward. A subclass gives the scores (:meth:`_scores`) and their
    backward (:meth:`_scores_backward`)."""

    supports_masking = True

    def __init__(self, *, use_scale: bool, dropout: float, use_causal_mask: bool,
                 return_attention_scores: bool, seed: int | None, dtype: Any, name: str | None) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        self.use_scale = check_bool(use_scale, "use_scale", self.name)
        self.dropout = check_dropout(dropout, self.name)
        self.use_causal_mask = check_bool(use_causal_mask, "use_causal_mask", self.name)
        self.return_attention_scores = check_bool(return_attention_scores, "return_attention_scores",
                                                  self.name)

    # -- shapes --------------------------------------------------------------------------------
    def _shapes(self, shapes: Any) -> list[Shape]:
        out = query_value_key(shapes, self.name)
        q, v = out[0], out[1]
        k = out[2] if len(out) > 2 else v
        if v[1] is not None and k[1] is not None and v[1] != k[1]:
            raise InvalidInputError(f"{self.name}: value and key must have the same timesteps, got value "
                                    f"{v} and key {k}")
        if q[-1] != k[-1]:
            raise InvalidInputError(f"{self.name}: query and key must have the same feature width, got "
                                    f"query {q} and key {k}")
        return out

    def _merged_shape(self, shapes: list[Shape]) -> Any:
        q, v = shapes[0], shapes[1]
        out = Shape((q[0], q[1], v[-1]))
        if self.return_attention_scores:
            return [out, Shape((q[0], q[1], v[1]))]
        return out

    def _check_rebuild(self, shape: Any) -> None:
        shapes = self._shapes(shape)
        if shapes[0][-1] != self.input_shape[-1]:
            raise InvalidInputError(f"{self.name}: built for a query of width {self.input_shape[-1]}, "
                                    f"asked to build again for {shapes[0]}")

    def build(self, shape: Any) -> None:  # a list of shapes
        shapes = self._shapes(shape)
        if self._input_shape is not None:
            self._check_rebuild(shapes)
            return
        self._weights, self._decls = {}, {}
        self._build_weights(int(shapes[0][-1]), make_rng(self._seed))  # type: ignore[arg-type]
        self._check_weight_keywords()
        self._input_shape = shapes[0]

    def _build_weights(self, dim: int, rng: np.random.Generator) -> None:
        raise MethodNotImplementedError(f"{type(self).__name__}._build_weights is not implemented; a "
                                        f"subclass provides it")

    # -- masks ---------------------------------------------------------------------------------
    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        """The query's mask (Keras); None without one."""
        n = len(x) if isinstance(x, (list, tuple)) else 2
        masks = as_masks(mask, n, self.name)
        return masks[0]

    # -- passes --------------------------------------------------------------------------------
    def _inputs(self, x: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, bool]:
        if not isinstance(x, (list, tuple)) or not 2 <= len(x) <= 3:
            raise InvalidInputError(f"{self.name}: expected a list [query, value] or [query, value, key], "
                                    f"got {type(x).__name__}"
                                    + (f" of {len(x)}" if isinstance(x, (list, tuple)) else ""))
        arrs = [self._as_input(a, nm) for a, nm in zip(x, ("query", "value", "key"), strict=False)]
        self._shapes([a.shape for a in arrs])
        if not self.built:   # a first call on arrays builds, as Keras' does
            self.build([Shape.with_free_batch(a.shape) for a in arrs])
        q, v = arrs[0], arrs[1]
        if q.shape[-1] != self.input_shape[-1] or v.shape[0] != q.shape[0] \
                or (len(arrs) > 2 and arrs[2].shape[0] != q.shape[0]):
            raise InvalidInputError(f"{self.name}: expected query (batch, Tq, {self.input_shape[-1]}) and "
                                    f"value/key of the same batch, got shapes {[a.shape for a in arrs]}")
        return q, v, (arrs[2] if len(arrs) > 2 else v), len(arrs) > 2

    def forward(self, x: Any, ctx: Ctx) -> Any:  # type: ignore[override]
        return self.forward_masked(x, None, ctx)

    def forward_masked(self, x: Any, masks: Any, ctx: Ctx) -> Any:
        """The pass under ``masks`` = [query_mask, value_mask(, key mask, unused)] (Masks, boolean
        (B, T) arrays or None)."""
        q, v, k, has_key = self._inputs(x)
        B, Tq, Tv = q.shape[0], q.shape[1], v.shape[1]
        ms = as_masks(masks, 3 if has_key else 2, self.name)
        q_valid = _check_mask(ms[0], "query_mask", B, Tq, self.name)
        v_valid = _check_mask(ms[1], "value_mask", B, Tv, self.name)
        s, cache = self._scores(q, k)
        keep = score_mask(v_valid, self.use_causal_mask, B, Tq, Tv)
        if keep is not None:
            s = np.where(keep, s, s - self.dtype.type(MASK_SHIFT))
        w = softmax_last(s)
        drop = None
        if ctx.drops and self.dropout > 0.0:
            drop = (ctx.rng.random(w.shape) >= self.dropout).astype(self.dtype)
            drop /= self.dtype.type(1.0 - self.dropout)
        wd = w if drop is None else w * drop
        out = np.matmul(wd, v)
        if q_valid is not None:
            out *= q_valid[:, :, None]
        ctx.save(self, (q, v, k, has_key, cache, w, drop, wd, q_valid))
        return [out, wd] if self.return_attention_scores else out

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        q, v, k, has_key, cache, w, drop, wd, q_valid = ctx.peek(self)
        out_shape = (q.shape[0], q.shape[1], v.shape[2])
        g_out, g_w = split_scores_grad(self, grad, out_shape, w.shape)
        ctx.load(self)  # consumed only once the gradient fits
        if q_valid is not None:
            g_out = g_out * q_valid[:, :, None]
        g_wd = np.matmul(g_out, np.swapaxes(v, 1, 2))
        if g_w is not None:
            g_wd += g_w
        dv = np.matmul(np.swapaxes(wd, 1, 2), g_out)
        dw = g_wd if drop is None else g_wd * drop
        ds = w * (dw - np.sum(dw * w, axis=-1, keepdims=True))
        dq, dk = self._scores_backward(ds, q, k, cache, ctx)
        if not has_key:
            return [dq, dv + dk]
        return [dq, dv, dk]

    def _scores(self, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, Any]:
        raise MethodNotImplementedError(f"{type(self).__name__}._scores is not implemented; a "
                                        f"subclass provides it")

    def _scores_backward(self, ds: np.ndarray, q: np.ndarray, k: np.ndarray, cache: Any,
                         ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
        raise MethodNotImplementedError(f"{type(self).__name__}._scores_backward is not implemented; a "
                                        f"subclass provides it")

    def get_config(self) -> dict[str, Any]:
        return {"use_scale": self.use_scale, "dropout": self.dropout,
                "use_causal_mask": self.use_causal_mask,
                "return_attention_scores": self.return_attention_scores,
                "seed": self._seed, "dtype": self.dtype.name, "name": self.name}


class Attention(_ScoreAttention):
    """Dot-product (Luong) attention, Keras 3's ``layers.Attention``.

    ``score_mode="dot"``: ``scores = query @ key^T``, times the scalar ``scale`` with
    ``use_scale=True``. ``score_mode="concat"``: ``scores = concat_score_weight *
    sum(tanh(scale * (query_i + key_j)), features)`` (``scale`` only with ``use_scale``).
    Weights, in Keras' order: ``scale`` () with ``use_scale`` (ones), ``concat_score_weight`` ()
    with ``"concat"`` (ones). The rest (masks, softmax, dropout, outputs) is the module's.
    """

    def __init__(self, use_scale: bool = False, score_mode: str = "dot", dropout: float = 0.0, *,
                 use_causal_mask: bool = False, return_attention_scores: bool = False,
                 seed: int | None = None, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(use_scale=use_scale, dropout=dropout, use_causal_mask=use_causal_mask,
                         return_attention_scores=return_attention_scores, seed=seed, dtype=dtype,
                         name=name)
        if score_mode not in ("dot", "concat"):
            raise InvalidParameterError(f"{self.name}: score_mode must be 'dot' or 'concat', got "
                                        f"{score_mode!r}")
        self.score_mode = score_mode

    def _build_weights(self, dim: int, rng: np.random.Generator) -> None:
        if self.use_scale:
            self._add_weight("scale", np.ones((), self.dtype))
        if self.score_mode == "concat":
            self._add_weight("concat_score_weight", np.ones((), self.dtype))

    def _scores(self, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, Any]:
        if self.score_mode == "dot":
            raw = np.matmul(q, np.swapaxes(k, 1, 2))
            if not self.use_scale:
                return raw, raw
            return raw * self._weights["scale"], raw
        a = q[:, :, None, :] + k[:, None, :, :]
        u = np.tanh(a * self._weights["scale"] if self.use_scale else a)
        su = u.sum(axis=-1)
        return self._weights["concat_score_weight"] * su, (a, u, su)

    def _scores_backward(self, ds: np.ndarray, q: np.ndarray, k: np.ndarray, cache: Any,
                         ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
        if self.score_mode == "dot":
            raw = cache
            if self.use_scale:
                ctx.add_grad(self, "scale", np.asarray(np.sum(ds * raw), self.dtype))
                ds = ds * self._weights["scale"]
            return np.matmul(ds, k), np.matmul(np.swapaxes(ds, 1, 2), q)
        a, u, su = cache
        ctx.add_grad(self, "concat_score_weight", np.asarray(np.sum(ds * su), self.dtype))
        da = (ds * self._weights["concat_score_weight"])[..., None] * (1.0 - u * u)
        if self.use_scale:
            ctx.add_grad(self, "scale", np.asarray(np.sum(da * a), self.dtype))
            da = da * self._weights["scale"]
        return da.sum(axis=2), da.sum(axis=1)

    def get_config(self) -> dict[str, Any]:
        return {"score_mode": self.score_mode, **super().get_config()}


class AdditiveAttention(_ScoreAttention):
    """Additive (Bahdanau) attention, Keras 3's ``layers.AdditiveAttention``:
    ``scores = sum(scale * tanh(query_i + key_j), features)`` (``scale`` (D,) with
    ``use_scale=True``, the default; Glorot-uniform U(-l, l), ``l = sqrt(3 / D)`` as Keras draws a
    vector; without it the plain sum). Query and key have one width D. The rest (masks, softmax,
    dropout, outputs) is the module's.
    """

    def __init__(self, use_scale: bool = True, dropout: float = 0.0, *, use_causal_mask: bool = False,
                 return_attention_scores: bool = False, seed: int | None = None, dtype: Any = "float32",
                 name: str | None = None) -> None:
        super().__init__(use_scale=use_scale, dropout=dropout, use_causal_mask=use_causal_mask,
                         return_attention_scores=return_attention_scores, seed=seed, dtype=dtype,
                         name=name)

    def _build_weights(self, dim: int, rng: np.random.Generator) -> None:
        if self.use_scale:
            self._add_weight("scale", glorot_uniform(rng, (dim,), dim, dim, self.dtype))

    def _scores(self, q: np.ndarray, k: np.ndarray) -> tuple[np.ndarray, Any]:
        u = np.tanh(q[:, :, None, :] + k[:, None, :, :])
        if self.use_scale:
            return np.sum(u * self._weights["scale"], axis=-1), u
        return u.sum(axis=-1), u

    def _scores_backward(self, ds: np.ndarray, q: np.ndarray, k: np.ndarray, cache: Any,
                         ctx: Ctx) -> tuple[np.ndarray, np.ndarray]:
        u = cache
        du = np.broadcast_to(ds[..., None], u.shape)
        if self.use_scale:
            ctx.add_grad(self, "scale", np.einsum("bqv,bqvd->d", ds, u).astype(self.dtype, copy=False))
            du = du * self._weights["scale"]
        da = du * (1.0 - u * u)
        return da.sum(axis=2), da.sum(axis=1)
