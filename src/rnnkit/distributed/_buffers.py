"""The model's weights and gradients laid out flat, for the collectives.

:class:`FlatLayout` fixes the order once per ``fit``: every trainable weight in
``model.named_weights()`` order, grouped by dtype (float32 first, then float64), each group one
contiguous buffer. A step's gradients are written into those buffers (scaled by the rank's share
of the global batch), summed over the ranks by ONE ``Allreduce`` per buffer, and read back as
views. Because every rank sums the same numbers in the same order, every rank gets the same bits.
Each step writes into buffers of its own (made by :meth:`FlatLayout.load_grads`), so the
gradients a step hands to the optimizer are never overwritten by a later step, whatever the
optimizer keeps.
"""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from rnnkit._consistency import WEIGHTS
from rnnkit._ctx import Ctx
from rnnkit._layer import Layer
from rnnkit.distributed._comm import Comm
from rnnkit.models._checks import Trainable as Model


class FlatLayout:
    """Where each trainable weight of ``model`` lives in the flat buffers (see the module doc).

    ``buffers`` (one per dtype, new for every step) hold gradients during a step; ``views[i]``
    is weight ``i``'s slot, shaped like the weight."""

    def __init__(self, model: Model) -> None:
        named = model.named_weights()
        self.names: list[str] = list(named)
        self.pairs: list[tuple[Layer, str]] = list(named.values())
        weights = [layer.weight(n) for layer, n in self.pairs]
        self._dtypes: list[np.dtype[Any]] = sorted({w.dtype for w in weights}, key=lambda d: d.itemsize)
        self._shapes: list[tuple[np.dtype[Any], tuple[int, ...]]] = [(w.dtype, w.shape) for w in weights]
        self.buffers: list[np.ndarray] = []
        self.views: list[np.ndarray] = []
        self._new_buffers()

    def _new_buffers(self) -> None:
        """Fresh zeroed :attr:`buffers` and their :attr:`views` (the arrays handed out before
        keep their values)."""
        dtypes = self._dtypes
        sizes = {d: sum(int(np.prod(s)) for dt, s in self._shapes if dt == d) for d in dtypes}
        self.buffers = [np.zeros(sizes[d], dtype=d) for d in dtypes]
        self.views = []
        offsets = dict.fromkeys(dtypes, 0)
        for dt, shape in self._shapes:
            a, n = offsets[dt], int(np.prod(shape))
            self.views.append(self.buffers[dtypes.index(dt)][a:a + n].reshape(shape))
            offsets[dt] = a + n

    @property
    def nbytes(self) -> int:
        """Bytes one rank sends into the gradient allreduce per step."""
        return int(sum(b.nbytes for b in self.buffers))

    def signature(self) -> list[tuple[str, tuple[int, ...], str]]:
        """(name, shape, dtype) of every weight: equal on every rank of one model."""
        return [(n, tuple(v.shape), v.dtype.name) for n, v in zip(self.names, self.views, strict=True)]

    # -- gradients ---------------------------------------------------------------------------
    def load_grads(self, ctx: Ctx | None, scale: float) -> list[float]:
        """Write ``scale * grad`` of every weight into its slot of fresh buffers (zeros for a
        weight without a gradient, or every weight when ``ctx`` is None); returns 1.0/0.0 per
        weight: whether this rank had a gradient for it. The previous step's buffers, and the
        gradients :meth:`grad_pairs` handed out of them, are left as they are."""
        self._new_buffers()
        present: list[float] = []
        for (layer, n), view in zip(self.pairs, self.views, strict=True):
            g = None if ctx is None else ctx.grads.get((layer, n))
            if g is None:
                view[...] = 0
                present.append(0.0)
            else:
                np.multiply(g, view.dtype.type(scale), out=view, casting="unsafe")
                present.append(1.0)
        return present

    def allreduce(self, dist: Comm) -> None:
        """Sum every buffer over the ranks, in place (one Allreduce per buffer)."""
        for b in self.buffers:
            dist.allreduce_sum(b)

    def grad_pairs(self, present: np.ndarray) -> list[tuple[Layer, str, np.ndarray]]:
        """``(layer, name, summed gradient)`` for every weight some rank had a gradient for,
        in layout order (what ``optimizer.apply_gradients`` takes)."""
        return [(layer, n, view) for (layer, n), view, p in zip(self.pairs, self.views, present,
                                                                 strict=True) if p > 0]

    # -- weights -----------------------------------------------------------------------------
    def bcast_weights(self, dist: Comm) -> None:
        """Every rank takes rank 0's weights (through fresh buffers: the gradients handed out
        of the earlier ones keep their values)."""
        self._new_buffers()
        for (layer, n), view in zip(self.pairs, self.views, strict=True):
            view[...] = layer.weight(n)
        for b in self.buffers:
            dist.bcast_array(b)
        if not dist.is_root:
            with WEIGHTS:   # one write: a reader in another thread sees all of it or none
                for (layer, n), view in zip(self.pairs, self.views, strict=True):
                    layer.set_weight(n, view)

    def weights_crc(self) -> int:
        """CRC-32 of every weight's bytes, in layout order (equal iff the bits are, almost
        surely)."""
        crc = 0
        for layer, n in self.pairs:
            crc = zlib.crc32(_bytes(layer.weight(n)), crc)
        return crc


def optimizer_state(opt: Any, layout: FlatLayout) -> dict[str, Any]:
    """The optimizer's step count, learning rate and per-weight slots, keyed by weight NAME
    (layer objects differ between processes)."""
    index = {(id(layer), n): name for name, (layer, n) in zip(layout.names, layout.pairs, strict=True)}
    slots = {index[(id(layer), n)]: st for (layer, n), st in opt._state.items()
             if (id(layer), n) in index}
    return {"iterations": opt.iterations, "learning_rate": opt.learning_rate, "slots": slots}


def set_optimizer_state(opt: Any, layout: FlatLayout, state: dict[str, Any]) -> None:
    """Install what :func:`optimizer_state` returned (on another rank's optimizer)."""
    by_name = dict(zip(layout.names, layout.pairs, strict=True))
    opt._state.clear()
    for name, st in state["slots"].items():
        opt._state[by_name[name]] = {k: (np.array(v) if isinstance(v, np.ndarray) else v)
                                     for k, v in st.items()}
    opt.iterations = int(state["iterations"])
    opt.learning_rate = float(state["learning_rate"])


def _bytes(a: np.ndarray) -> memoryview:
    """The bytes of ``a`` (C order) without a copy when it is already contiguous."""
    return memoryview(np.ascontiguousarray(a).reshape(-1)).cast("B")  # type: ignore[arg-type]


def data_crc(arrays: list[np.ndarray]) -> int:
    """CRC-32 of the arrays' shapes, dtypes and bytes (to check replicated data is the same)."""
    crc = 0
    for a in arrays:
        crc = zlib.crc32(repr((a.shape, a.dtype.str)).encode(), crc)
        crc = zlib.crc32(_bytes(a), crc)
    return crc
