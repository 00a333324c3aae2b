"""Stepping a model a few timesteps at a time from a kept state: the streams of the server.

A stream of a ``Sequential`` model keeps the state of each recurrent layer: a layer with the
streaming protocol (``zero_state(batch)`` for the state's parts and their shapes,
``seq_init(x, state)`` from a kept state), a :class:`~rnnkit.RecurrentLayer` or a
``ConvLSTM1D`` / ``ConvLSTM2D`` (whose timesteps are grids ``(*spatial, channels)``; a binary
step then holds each timestep's values flattened, row-major). A step feeds ``T`` timesteps
``(T, features)`` through the layers in order: a recurrent layer runs from the kept
state (``seq_init``) and yields its output at every timestep; the per-timestep layers after it
(``Dense``, ``ActivationLayer``, ``Dropout``) map each of those outputs. So the output at a
timestep is what the model gives for the whole sequence so far; a layer with
``return_sequences=False`` hands its per-timestep outputs on as rows ``(T, units)``, exactly the
2-D input that layer's successors get in ``predict``.

An :class:`rnnkit.rnn.RNNNet` (unidirectional) keeps its ``(num_layers, width)`` state parts.

Batching several streams into one call is used per layer only where it gives every stream the
bits it gets alone (checked at start with random inputs of several batch sizes); other layers
are run stream by stream.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit.layers import ActivationLayer, ConvLSTM1D, ConvLSTM2D, Dense, Dropout
from rnnkit.models import Sequential
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNNet

_ROWWISE = (Dense, ActivationLayer, Dropout)
#: the layers a stream steps from a kept state (the streaming protocol: ``zero_state``, ``seq_init``)
_STREAMING = (RecurrentLayer, ConvLSTM1D, ConvLSTM2D)


@dataclass(frozen=True)
class StateEntry:
    """One array of a stream's state: its name, its shape for one stream, and the axis along
    which the states of several streams are stacked for one batched call."""

    name: str
    shape: tuple[int, ...]
    axis: int


@dataclass
class _Op:
    layer: Any
    recurrent: bool
    width: tuple[int, ...]  # the shape of one timestep of the layer's input
    flat: bool = False  # a per-timestep layer that gets rows (B * T, *width), not (B, T, *width)
    batched: bool = True
    parts: int = 0  # a recurrent layer's number of state parts


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def _rows(n: int) -> list[int]:
    return sorted({0, 1 % n, n // 2, n - 1})


class StreamPlan:
    """How to step a model: the state entries, and :meth:`step` for a batch of streams."""

    def __init__(self, model: Any, ops: list[_Op], entries: list[StateEntry], step_shape: tuple[int, ...],
                 out_shape: tuple[int, ...]) -> None:
        self.model = model
        self.ops = ops
        self.entries = entries
        #: the shape of one timestep of the model's input, and its number of values
        self.step_shape = step_shape
        self.features = int(np.prod(step_shape))
        self.out_shape = out_shape
        self.dtype = np.dtype(model.dtype if isinstance(model, RNNNet) else model.layers[0].dtype)

    @property
    def batched(self) -> bool:
        """Whether every layer runs all the streams of a batch in one call."""
        return all(op.batched for op in self.ops)

    def zero(self) -> list[np.ndarray]:
        """A new stream's state (zeros)."""
        return [np.zeros(e.shape, self.dtype) for e in self.entries]

    def stack(self, states: list[list[np.ndarray]]) -> list[np.ndarray]:
        """The batched state of several streams (each a list of per-stream arrays)."""
        return [np.array([s[k] for s in states]) if e.axis == 0 else
                np.stack([s[k] for s in states], axis=e.axis) for k, e in enumerate(self.entries)]

    def split(self, batched: list[np.ndarray], n: int) -> list[list[np.ndarray]]:
        """The per-stream states (contiguous copies, holding nothing of the batch) of a batched
        state of ``n`` streams."""
        cols = [[r.copy() for r in np.moveaxis(b, e.axis, 0)[:n]]
                for b, e in zip(batched, self.entries, strict=True)]
        return [list(parts) for parts in zip(*cols, strict=True)]

    def step(self, x: np.ndarray, states: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        """Advance ``B`` streams by the ``T`` timesteps of ``x`` (B, T, *step_shape), or each
        timestep's values flattened (B, T, features), from their batched ``states``: (outputs
        (B, T, *out_shape), new batched states)."""
        if isinstance(self.model, RNNNet):
            return self._net_step(x, states, self.ops[0].batched)
        B, T = x.shape[0], x.shape[1]
        h: np.ndarray = x.reshape(B, T, *self.step_shape)
        flat = False
        k = 0
        new: list[np.ndarray] = []
        for op in self.ops:
            if op.recurrent:
                n = op.parts
                seq, fin = self._rec(op, h, states[k:k + n])
                new += [np.asarray(f) for f in fin]
                k += n
                if op.layer.return_sequences:
                    h = seq
                else:
                    h, flat = np.ascontiguousarray(seq).reshape(B * T, *seq.shape[2:]), True
            elif op.batched:
                h = op.layer.forward(h, Ctx.inference())
            else:
                size = T if flat else 1
                h = np.concatenate([op.layer.forward(h[b * size:(b + 1) * size], Ctx.inference())
                                    for b in range(B)])
        y = h.reshape(B, T, *h.shape[1:]) if flat else h
        return y, new

    @staticmethod
    def _rec(op: _Op, h: np.ndarray, st: list[np.ndarray]) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
        layer = op.layer
        if op.batched:
            seq, fin = layer.seq_init(h, tuple(st))
            return seq, tuple(fin)
        parts = [layer.seq_init(h[b:b + 1], tuple(s[b:b + 1] for s in st)) for b in range(h.shape[0])]
        seq = np.concatenate([p[0] for p in parts])
        return seq, tuple(np.concatenate([p[1][j] for p in parts]) for j in range(len(st)))

    def _net_step(self, x: np.ndarray, states: list[np.ndarray],
                  batched: bool) -> tuple[np.ndarray, list[np.ndarray]]:
        net: RNNNet = self.model
        if not batched and x.shape[0] > 1:
            parts = [self._net_step(x[b:b + 1], [s[:, b:b + 1] for s in states], True)
                     for b in range(x.shape[0])]
            return (np.concatenate([p[0] for p in parts]),
                    [np.concatenate([p[1][j] for p in parts], axis=1) for j in range(len(states))])
        cell = net._layers[(0, 0)].cell
        xin = x if net.config.batch_first else x.transpose(1, 0, 2)
        y, fin = net.seq_init(xin, cell.make_state(tuple(states)))
        y = y if net.config.batch_first else y.transpose(1, 0, 2)
        return np.ascontiguousarray(y), [np.asarray(f) for f in fin]

    def describe(self) -> dict[str, Any]:
        """The streams part of ``/v1/model``."""
        return {
            "step_input": ["T", *self.step_shape],
            "step_output": ["T", *self.out_shape],
            "state": {e.name: list(e.shape) for e in self.entries},
            "batching": "batched" if self.batched else
                        "layer(s) " + ", ".join(op.layer.name for op in self.ops if not op.batched)
                        + " run stream by stream (their rows are not batch-independent)",
        }


def _check_op(plan: StreamPlan, i: int, sizes: list[int]) -> bool:
    """Whether op ``i`` gives each stream of a batch the bits it gets alone, for every size."""
    op = plan.ops[i]
    rng = np.random.default_rng(i)
    for n in sizes:
        if isinstance(plan.model, RNNNet) or op.recurrent:
            x = rng.standard_normal((n, 2, *op.width)).astype(plan.dtype)
            # states >= 0: every cell's state may be (a MinGRU / MinLSTM state must be)
            net = isinstance(plan.model, RNNNet)
            st = [0.5 * np.abs(rng.standard_normal(e.shape if net else (n, *e.shape)))
                  for e in _entries_of(plan, i)]
            if isinstance(plan.model, RNNNet):
                st = [np.repeat(s[:, None], n, axis=1)
                      + 0.1 * rng.standard_normal((s.shape[0], n, s.shape[1])) for s in st]
            st = [s.astype(plan.dtype) for s in st]
            run = (lambda xx, ss: plan._net_step(xx, ss, True)) if isinstance(plan.model, RNNNet) else \
                (lambda xx, ss: plan._rec(_Op(op.layer, True, op.width, parts=op.parts), xx, ss))
            ax = 1 if isinstance(plan.model, RNNNet) else 0
            y, fin = run(x, st)
            for b in _rows(n):
                y1, f1 = run(x[b:b + 1], [np.take(s, [b], axis=ax) for s in st])
                if not _same(y[b:b + 1], y1) or not all(_same(np.take(f, [b], axis=ax), g)
                                                        for f, g in zip(fin, f1, strict=True)):
                    return False
        else:
            x = rng.standard_normal((n, *op.width) if op.flat else (n, 2, *op.width)).astype(plan.dtype)
            y = op.layer.forward(x, Ctx.inference())
            if not all(_same(y[b:b + 1], op.layer.forward(x[b:b + 1], Ctx.inference())) for b in _rows(n)):
                return False
    return True


def _entries_of(plan: StreamPlan, i: int) -> list[StateEntry]:
    if isinstance(plan.model, RNNNet):
        return plan.entries
    k = sum(op.parts for op in plan.ops[:i] if op.recurrent)
    return plan.entries[k:k + plan.ops[i].parts]


def plan_streams(model: Any, sizes: list[int]) -> tuple[StreamPlan | None, str | None]:
    """(the plan, None), or (None, why the model cannot be stepped)."""
    if isinstance(model, RNNNet):
        if model.config.bidirectional:
            return None, "a bidirectional network reads each sequence from its end; it cannot be stepped"
        cell = model._layers[(0, 0)].cell
        L = model.config.num_layers
        net_entries = [StateEntry(n, (L, w), 1)
                       for n, w in zip(cell.state_names, cell.state_sizes(), strict=True)]
        plan = StreamPlan(model, [_Op(model, True, (model.in_dim,), parts=len(net_entries))], net_entries,
                          (model.in_dim,), (model.out_dim,))
        plan.ops[0].batched = _check_op(plan, 0, sizes)
        return plan, None
    if not isinstance(model, Sequential):
        return None, f"a {type(model).__name__} cannot be stepped; streams need a Sequential model"
    shape: tuple[Any, ...] = tuple(model.input_shapes()[0])
    if len(shape) < 3 or any(d is None for d in shape[2:]):
        return None, f"streams need an input (batch, timesteps, features); the model takes {shape}"
    ops: list[_Op] = []
    entries: list[StateEntry] = []
    flat = False
    width: tuple[int, ...] = tuple(int(d) for d in shape[2:])
    for i, layer in enumerate(model.layers):
        if isinstance(layer, _STREAMING):
            if layer.go_backwards:
                return None, f"layer {i} ({layer.name}) reads backwards (go_backwards); it cannot be stepped"
            if flat:
                return None, f"layer {i} ({layer.name}) follows a layer that returns one output per sequence"
            zero = layer.zero_state(1)
            ops.append(_Op(layer, True, width, parts=len(zero)))
            width = ((int(layer.output_size),) if isinstance(layer, RecurrentLayer)
                     else tuple(np.shape(zero[0])[1:]))
            entries += [StateEntry(f"{i}.{n}", tuple(np.shape(a)[1:]), 0)
                        for n, a in zip(zero._fields, zero, strict=True)]
            flat = not layer.return_sequences
        elif isinstance(layer, _ROWWISE):
            ops.append(_Op(layer, False, width, flat))
            width = (*width[:-1], int(layer.units)) if isinstance(layer, Dense) else width
        else:
            return None, (f"layer {i} ({type(layer).__name__}) is not one a stream can step (recurrent "
                          f"layers, Dense, ActivationLayer, Dropout)")
    if not any(op.recurrent for op in ops):
        return None, "the model has no recurrent layer; there is no state to keep"
    out = tuple(int(d) for d in tuple[Any, ...](tuple(model.output_shape))[1 if flat else 2:])
    plan = StreamPlan(model, ops, entries, tuple(int(d) for d in shape[2:]), out)
    for i, op in enumerate(plan.ops):
        op.batched = _check_op(plan, i, sizes)
    return plan, None


__all__ = ["StateEntry", "StreamPlan", "plan_streams"]
