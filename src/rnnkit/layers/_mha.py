"""``MultiHeadAttention``: Keras 3's ``layers.MultiHeadAttention`` over sequences.

Inputs: the list ``[query, value]`` or ``[query, value, key]`` (``key`` defaults to ``value``),
query (B, T, Dq), value (B, S, Dv), key (B, S, Dk); output (B, T, output_shape or Dq)::

    Q = (query @ Wq + bq) / sqrt(key_dim)     (B, T, N, key_dim)   Wq (Dq, N, key_dim)
    K = key @ Wk + bk                         (B, S, N, key_dim)   Wk (Dk, N, key_dim)
    V = value @ Wv + bv                       (B, S, N, value_dim) Wv (Dv, N, value_dim)
    scores = Q . K over key_dim               (B, N, T, S)
    P = softmax(scores where allowed, else -1e9), then 0 where not allowed when dropout > 0 or
        return_attention_scores (Keras' explicit path; its fused one, taken otherwise, leaves
        them: a query step allowed nowhere attends uniformly)
    O = dropout(P) . V over S                 (B, T, N, value_dim)
    output = O @ Wo + bo                      Wo (N, value_dim, out), bo (out,)

"Allowed" is Keras' attention mask: the AND of the query mask (B, T, 1), the value mask (B, 1,
S), the key mask (B, 1, S; only for a key given apart from the value), the causal mask (step
``t`` sees ``s <= t``) with ``use_causal_mask=True``, and an explicit ``attention_mask`` (B, T,
S). Masks come as ``mask=[query_mask, value_mask, key_mask, attention_mask]`` (any may be None
or left off; ``layer([q, v], attention_mask=m)`` is the same), or the masks a graph model
propagates; the output carries the query's mask. ``return_attention_scores=True`` gives two
outputs, ``[output, P]`` (P before dropout, as Keras). As for ``Attention``, Keras' call
arguments ``use_causal_mask`` and ``return_attention_scores`` are configuration here.

Weights, in Keras' order and shapes: ``query_kernel`` (Dq, N, key_dim), ``query_bias`` (N,
key_dim), ``key_kernel``, ``key_bias``, ``value_kernel`` (Dv, N, value_dim), ``value_bias``,
``attention_output_kernel`` (N, value_dim, out), ``attention_output_bias`` (out,) (no biases with
``use_bias=False``); kernels Glorot-uniform with Keras' fans for an einsum kernel, biases zeros.
Only the sequence case: ``attention_axes`` is None or the time axis (1, or -2).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit._initializers import glorot_uniform, zeros
from rnnkit._layer import check_bool
from rnnkit._mask import Mask
from rnnkit._random import make_rng
from rnnkit._shape import Shape
from rnnkit.layers._attention import (
    MASK_SHIFT,
    check_dropout,
    query_value_key,
    softmax_last,
    split_scores_grad,
)
from rnnkit.layers._merge import MergeLayer

_PARTS = ("query", "key", "value")


def _positive(value: Any, what: str, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise InvalidParameterError(f"{where}: {what} must be a positive integer, got {value!r}")
    return int(value)


def _mask_array(m: Any, what: str, shape: tuple[int, ...], where: str) -> np.ndarray | None:
    """A boolean array of ``shape`` from the mask ``m`` (None stays None); InvalidInputError
    naming ``what`` otherwise."""
    if m is None:
        return None
    if len(shape) == 2:
        mask = Mask.of(m)
        assert mask is not None
        if mask.kind == "mask" and np.shape(mask.valid(shape[1])) != shape or mask.batch != shape[0]:
            raise InvalidInputError(f"{where}: {what} must be a boolean (batch, timesteps) = {shape} "
                                    f"mask, got {mask!r}")
        mask.check(shape[0], shape[1], f"{where}: {what}")
        return mask.valid(shape[1])
    arr = np.asarray(m)
    if arr.shape != shape or not (arr.dtype == np.bool_ or arr.dtype.kind in "iu"):
        raise InvalidInputError(f"{where}: {what} must be a boolean array of shape (batch, Tq, Tv) = "
                                f"{shape}, got dtype {arr.dtype} shape {arr.shape}")
    return arr.astype(bool)


class MultiHeadAttention(MergeLayer):
    """Multi-head attention, Keras 3's (see the module docstring for the whole computation)."""

    supports_masking = True

    def __init__(self, num_heads: int, key_dim: int, value_dim: int | None = None, dropout: float = 0.0,
                 use_bias: bool = True, output_shape: int | tuple[int] | list[int] | None = None,
                 attention_axes: int | tuple[int, ...] | list[int] | None = None, *,
                 use_causal_mask: bool = False, return_attention_scores: bool = False,
                 seed: int | None = None, dtype: Any = "float32", name: str | None = None) -> None:
        super().__init__(seed=seed, dtype=dtype, name=name)
        self.num_heads = _positive(num_heads, "num_heads", self.name)
        self.key_dim = _positive(key_dim, "key_dim", self.name)
        self.value_dim = self.key_dim if value_dim is None else _positive(value_dim, "value_dim", self.name)
        self.dropout = check_dropout(dropout, self.name)
        self.use_bias = check_bool(use_bias, "use_bias", self.name)
        self.output_shape: int | None
        if output_shape is None:
            self.output_shape = None
        elif isinstance(output_shape, (int, np.integer)):
            self.output_shape = _positive(output_shape, "output_shape", self.name)
        elif isinstance(output_shape, (list, tuple)) and len(output_shape) == 1:
            self.output_shape = _positive(output_shape[0], "output_shape", self.name)
        else:
            raise InvalidParameterError(f"{self.name}: output_shape must be None, a positive int or a "
                                        f"1-tuple (the sequence case), got {output_shape!r}")
        axes = (attention_axes,) if isinstance(attention_axes, int) else attention_axes
        if axes is not None and (not isinstance(axes, (list, tuple)) or list(axes) not in ([1], [-2])):
            raise InvalidParameterError(f"{self.name}: attention_axes must be None or the time axis (1 or "
                                        f"-2: the sequence case), got {attention_axes!r}")
        self.attention_axes = None if axes is None else (1,)
        self.use_causal_mask = check_bool(use_causal_mask, "use_causal_mask", self.name)
        self.return_attention_scores = check_bool(return_attention_scores, "return_attention_scores",
                                                  self.name)

    # -- shapes and weights --------------------------------------------------------------------
    def _shapes(self, shapes: Any) -> list[Shape]:
        out = query_value_key(shapes, self.name)
        if len(out) > 2 and out[1][1] is not None and out[2][1] is not None and out[1][1] != out[2][1]:
            raise InvalidInputError(f"{self.name}: value and key must have the same timesteps, got value "
                                    f"{out[1]} and key {out[2]}")
        return out

    def _merged_shape(self, shapes: list[Shape]) -> Any:
        q, v = shapes[0], shapes[1]
        out = Shape((q[0], q[1], self.output_shape or q[-1]))
        if self.return_attention_scores:
            return [out, Shape((q[0], self.num_heads, q[1], v[1]))]
        return out

    def build(self, shape: Any) -> None:  # a list of shapes
        shapes = self._shapes(shape)
        widths = [int(s[-1]) for s in shapes]  # type: ignore[arg-type]
        widths = widths + [widths[1]] * (3 - len(widths))     # [Dq, Dv, Dk]
        if self._input_shape is not None:
            have = [self._weights[f"{p}_kernel"].shape[0] for p in ("query", "value", "key")]
            if widths != have:
                raise InvalidInputError(f"{self.name}: built for (query, value, key) widths {have}, asked "
                                        f"to build again for {widths}")
            return
        self._weights, self._decls = {}, {}
        rng = make_rng(self._seed)
        N, Kd, Vd = self.num_heads, self.key_dim, self.value_dim
        out = self.output_shape or widths[0]
        dims = {"query": (widths[0], Kd), "key": (widths[2], Kd), "value": (widths[1], Vd)}
        for part in _PARTS:
            d, e = dims[part]
            # Keras' fans of a (d, N, e) kernel: receptive field d, fan_in N * d, fan_out e * d
            self._add_weight(f"{part}_kernel", glorot_uniform(rng, (d, N, e), N * d, e * d, self.dtype))
            if self.use_bias:
                self._add_weight(f"{part}_bias", zeros((N, e), self.dtype))
        self._add_weight("attention_output_kernel",
                         glorot_uniform(rng, (N, Vd, out), Vd * N, out * N, self.dtype))
        if self.use_bias:
            self._add_weight("attention_output_bias", zeros((out,), self.dtype))
        self._check_weight_keywords()
        self._input_shape = shapes[0]

    # -- masks ---------------------------------------------------------------------------------
    def compute_mask(self, x: Any, mask: Any) -> Mask | None:
        """The query's mask (Keras); None without one."""
        if mask is None:
            return None
        if not isinstance(mask, (list, tuple)) or not mask:
            raise InvalidInputError(f"{self.name}: mask must be a list [query_mask, value_mask, key_mask, "
                                    f"attention_mask], got {mask!r}")
        return Mask.of(mask[0])

    def __call__(self, x: Any, ctx: Ctx | None = None, *, initial_state: Any = None, mask: Any = None,
                 training: bool | None = None, attention_mask: Any = None) -> Any:
        """:meth:`rnnkit.Layer.__call__`, plus Keras' ``attention_mask=`` (B, T, S) booleans (the
        fourth entry of ``mask=``)."""
        if attention_mask is not None:
            if ctx is not None:
                raise InvalidParameterError(f"{self.name}: attention_mask= goes with arrays, not with a ctx")
            given = list(mask) if isinstance(mask, (list, tuple)) else [mask]
            if len(given) > 3:
                raise InvalidParameterError(f"{self.name}: give attention_mask= or a fourth mask, not both")
            mask = (given + [None] * 3)[:3] + [attention_mask]
        return super().__call__(x, ctx, initial_state=initial_state, mask=mask, training=training)

    # -- passes --------------------------------------------------------------------------------
    def forward(self, x: Any, ctx: Ctx) -> Any:  # type: ignore[override]
        return self.forward_masked(x, None, ctx)

    def forward_masked(self, x: Any, masks: Any, ctx: Ctx) -> Any:
        """The pass under ``masks`` = [query_mask, value_mask, key_mask, attention_mask] (each
        may be None or left off)."""
        if not isinstance(x, (list, tuple)) or not 2 <= len(x) <= 3:
            raise InvalidInputError(f"{self.name}: expected a list [query, value] or [query, value, key], "
                                    f"got {type(x).__name__}")
        arrs = [self._as_input(a, nm) for a, nm in zip(x, ("query", "value", "key"), strict=False)]
        self._shapes([a.shape for a in arrs])
        if not self.built:
            self.build([Shape.with_free_batch(a.shape) for a in arrs])
        has_key = len(arrs) > 2
        q, v = arrs[0], arrs[1]
        k = arrs[2] if has_key else v
        B, T, S = q.shape[0], q.shape[1], v.shape[1]
        if any(a.shape[0] != B for a in arrs) or k.shape[1] != S:
            raise InvalidInputError(f"{self.name}: query, value and key must share the batch, value and key "
                                    f"the timesteps; got shapes {[a.shape for a in arrs]}")
        for part, a in (("query", q), ("value", v), ("key", k)):
            if a.shape[-1] != self._weights[f"{part}_kernel"].shape[0]:
                raise InvalidInputError(f"{self.name}: {part} has {a.shape[-1]} features, the layer was "
                                        f"built for {self._weights[f'{part}_kernel'].shape[0]}")
        allowed = self._allowed(masks, B, T, S, has_key)
        N, Kd, Vd = self.num_heads, self.key_dim, self.value_dim
        Qh = self._project("query", q).reshape(B, T, N, Kd).transpose(0, 2, 1, 3)   # (B, N, T, Kd)
        Qh *= self.dtype.type(1.0 / math.sqrt(float(Kd)))
        Kh = self._project("key", k).reshape(B, S, N, Kd).transpose(0, 2, 3, 1)     # (B, N, Kd, S)
        Vh = self._project("value", v).reshape(B, S, N, Vd).transpose(0, 2, 1, 3)   # (B, N, S, Vd)
        s = np.matmul(Qh, Kh)                                                       # (B, N, T, S)
        if allowed is not None:
            s = np.where(allowed, s, self.dtype.type(-MASK_SHIFT))
        p0 = softmax_last(s)
        # Keras' two paths: with dropout or returned scores, the probabilities of the masked
        # scores are then set to 0 (a query step masked everywhere gets 0); otherwise (its fused
        # kernel) they stay (such a step gets the uniform 1 / S)
        zeroed = allowed is not None and (self.dropout > 0.0 or self.return_attention_scores)
        p = np.where(allowed, p0, self.dtype.type(0.0)) if zeroed and allowed is not None else p0
        drop = None
        if ctx.drops and self.dropout > 0.0:
            drop = (ctx.rng.random(p.shape) >= self.dropout).astype(self.dtype)
            drop /= self.dtype.type(1.0 - self.dropout)
        pd = p if drop is None else p * drop
        o = np.matmul(pd, Vh).transpose(0, 2, 1, 3).reshape(B * T, N * Vd)         # (B*T, N*Vd)
        out = o @ self._weights["attention_output_kernel"].reshape(N * Vd, -1)
        if self.use_bias:
            out += self._weights["attention_output_bias"]
        out = out.reshape(B, T, -1)
        ctx.save(self, (q, v, k, has_key, Qh, Kh, Vh, p0, pd, drop, allowed, zeroed, o))
        return [out, p] if self.return_attention_scores else out

    def _project(self, part: str, a: np.ndarray) -> np.ndarray:
        w = self._weights[f"{part}_kernel"]
        y = a.reshape(-1, a.shape[-1]) @ w.reshape(w.shape[0], -1)
        if self.use_bias:
            y += self._weights[f"{part}_bias"].reshape(-1)
        return y

    def _allowed(self, masks: Any, B: int, T: int, S: int, has_key: bool) -> np.ndarray | None:
        """Keras' attention mask ((B or 1, 1, T, S) booleans), or None when every score counts."""
        if masks is not None and (not isinstance(masks, (list, tuple)) or len(masks) > 4):
            raise InvalidInputError(f"{self.name}: mask must be a list [query_mask, value_mask, key_mask, "
                                    f"attention_mask], got {masks!r}")
        ms = (list(masks or []) + [None] * 4)[:4]
        qm = _mask_array(ms[0], "query_mask", (B, T), self.name)
        vm = _mask_array(ms[1], "value_mask", (B, S), self.name)
        km = _mask_array(ms[2], "key_mask", (B, S), self.name) if has_key else None
        am = _mask_array(ms[3], "attention_mask", (B, T, S), self.name)
        causal = (np.arange(T)[:, None] >= np.arange(S)[None, :])[None] if self.use_causal_mask else None
        allowed: np.ndarray | None = None
        for part in (None if qm is None else qm[:, :, None], None if vm is None else vm[:, None, :],
                     None if km is None else km[:, None, :], am, causal):
            if part is not None:
                allowed = part if allowed is None else allowed & part
        return None if allowed is None else allowed[:, None]

    def backward(self, grad: Any, ctx: Ctx) -> list[np.ndarray]:  # type: ignore[override]
        q, v, k, has_key, Qh, Kh, Vh, p0, pd, drop, allowed, zeroed, o = ctx.peek(self)
        B, T, S = q.shape[0], q.shape[1], v.shape[1]
        N, Kd, Vd = self.num_heads, self.key_dim, self.value_dim
        wo = self._weights["attention_output_kernel"]
        out_shape = (B, T, wo.shape[-1])
        g_out, g_p = split_scores_grad(self, grad, out_shape, p0.shape)
        ctx.load(self)  # consumed only once the gradient fits
        g2 = g_out.reshape(B * T, -1)
        ctx.add_grad(self, "attention_output_kernel", (o.T @ g2).reshape(wo.shape))
        if self.use_bias:
            ctx.add_grad(self, "attention_output_bias", g2.sum(axis=0))
        do = (g2 @ wo.reshape(N * Vd, -1).T).reshape(B, T, N, Vd).transpose(0, 2, 1, 3)   # (B, N, T, Vd)
        dpd = np.matmul(do, Vh.transpose(0, 1, 3, 2))                                      # (B, N, T, S)
        dvh = np.matmul(pd.transpose(0, 1, 3, 2), do)                                      # (B, N, S, Vd)
        dp = dpd if drop is None else dpd * drop
        if g_p is not None:
            dp = dp + g_p
        if zeroed:
            dp = np.where(allowed, dp, self.dtype.type(0.0))
        ds = p0 * (dp - np.sum(dp * p0, axis=-1, keepdims=True))
        if allowed is not None:
            ds = np.where(allowed, ds, self.dtype.type(0.0))
        dqh = np.matmul(ds, Kh.transpose(0, 1, 3, 2)) * self.dtype.type(1.0 / math.sqrt(float(Kd)))
        dkh = np.matmul(ds.transpose(0, 1, 3, 2), Qh)                                     # (B, N, S, Kd)
        grads = {"query": (q, dqh.transpose(0, 2, 1, 3).reshape(B * T, N * Kd)),
                 "key": (k, dkh.transpose(0, 2, 1, 3).reshape(B * S, N * Kd)),
                 "value": (v, dvh.transpose(0, 2, 1, 3).reshape(B * S, N * Vd))}
        dx: dict[str, np.ndarray] = {}
        for part, (a, dproj) in grads.items():
            w = self._weights[f"{part}_kernel"]
            a2 = a.reshape(-1, a.shape[-1])
            ctx.add_grad(self, f"{part}_kernel", (a2.T @ dproj).reshape(w.shape))
            if self.use_bias:
                ctx.add_grad(self, f"{part}_bias", dproj.sum(axis=0).reshape(w.shape[1:]))
            dx[part] = (dproj @ w.reshape(w.shape[0], -1).T).reshape(a.shape)
        if not has_key:
            return [dx["query"], dx["value"] + dx["key"]]
        return [dx["query"], dx["value"], dx["key"]]

    def get_config(self) -> dict[str, Any]:
        return {"num_heads": self.num_heads, "key_dim": self.key_dim, "value_dim": self.value_dim,
                "dropout": self.dropout, "use_bias": self.use_bias, "output_shape": self.output_shape,
                "attention_axes": None if self.attention_axes is None else list(self.attention_axes),
                "use_causal_mask": self.use_causal_mask,
                "return_attention_scores": self.return_attention_scores,
                "seed": self._seed, "dtype": self.dtype.name, "name": self.name}

