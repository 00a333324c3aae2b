"""``StackedRNNCells``: Keras' stack of cells, one cell whose step runs every cell in turn.

At each step cell 0 reads the step's input, cell ``k`` reads the output of cell ``k-1`` at the
same step, and the stack's output is the last cell's output. The state is every cell's state
parts in Keras' order: all of cell 0's parts, then cell 1's, ... (``RNN(return_state=True)``
returns ``[output, *parts]`` in that order, and ``initial_state`` takes them so), which makes
the output the part :attr:`~rnnkit.Cell.output_part` = the last cell's first part.

Weights: each cell's parameters under ``cells.<k>.<name>`` (``cells.0.kernel``), cell by cell,
in each cell's order (Keras' order of ``RNN(StackedRNNCells).weights``).

Two forms compute the stack (the walker chooses between them, :func:`~rnnkit.recurrent._walker.
sequence_form`):

- **whole sequence** (:meth:`StackedRNNCells.sequence_forward` / ``sequence_backward``; every
  pass of two steps or more, masked or not): cell 0 never reads cell 1, so walking cell 0's
  recurrence over the whole sequence and then cell 1's over cell 0's outputs computes what the
  step form computes, step for step. Each cell is walked by the walker (:func:`~rnnkit.recurrent.
  _walker.walk`) in its own best form: compiled where its compiled step runs, its own parallel
  form where it has one, the reference loop otherwise; the backward walks the cells in reverse
  order (:func:`~rnnkit.recurrent._walker.walk_back`), the input gradient of cell ``k`` being
  the output gradient of cell ``k-1``. A masked step carries every cell's state (each walk
  takes the pass's mask). It returns every step's output (the last cell's) and the final
  state of every other part (:attr:`~rnnkit.Cell.sequence_last_states`); a training pass parks
  each cell's walk cache: ``cells.<k>.states.<j>`` (state part ``j`` of cell ``k``, (T+1, B,
  size)) and ``cells.<k>.parks.<name>``.
- **step** (:meth:`StackedRNNCells.step` / ``step_back``, the reference; a single step, as in
  streaming): the step projects each cell's input with the cell's input kernel and its
  ``step_back`` reduces each cell's kernels and biases at every step, as the walker's batched
  reductions would over all steps (the same sums, in another order).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._errors import InvalidParameterError
from rnnkit.recurrent._cell import Arrays, Cell, Param, SequenceBack, StepBack
from rnnkit.recurrent._registry import cell_from_config, cell_to_config, register_cell
from rnnkit.recurrent._walker import WalkCache, sequence_form, walk, walk_back


@register_cell
class StackedRNNCells(Cell):
    """``StackedRNNCells(cells)``: the cells (a non-empty list of :class:`~rnnkit.Cell`, or their
    ``{"class_name", "config"}``) stacked within one step; see the module docstring.

    A cell with its own dropout, recurrent dropout, regularizers or constraints is refused
    (InvalidParameterError): give them to the ``RNN`` layer over the stack.
    """

    name = "StackedRNNCells"
    #: the whole-sequence form walks each cell under the pass's mask
    sequence_takes_mask = True
    #: the whole-sequence form returns every step of the output part only
    sequence_last_states = True

    def __init__(self, cells: Sequence[Cell | dict[str, Any]]) -> None:
        if isinstance(cells, (str, bytes, Mapping)) or not isinstance(cells, Sequence) or not cells:
            raise InvalidParameterError(
                f"StackedRNNCells: expected a non-empty list of cells, got {cells!r}")
        made = [cell_from_config(c) if isinstance(c, dict) else c for c in cells]
        for k, c in enumerate(made):
            if not isinstance(c, Cell):
                raise InvalidParameterError(
                    f"StackedRNNCells: cell {k} must be an rnnkit.Cell, got {type(c).__name__}")
            if c.dropout or c.recurrent_dropout or c.weight_keywords:
                raise InvalidParameterError(
                    f"StackedRNNCells: cell {k} ({type(c).__name__}) has dropout, recurrent_dropout, "
                    f"regularizers or constraints of its own; expected none (give them to the RNN layer)")
            if isinstance(c, StackedRNNCells):
                raise InvalidParameterError(
                    f"StackedRNNCells: cell {k} is a StackedRNNCells; expected its cells listed in this one")
        self.cells: list[Cell] = made
        self.units = made[-1].units
        self.activation = made[-1].activation
        #: per cell: its first state part's index in the stack's parts, and its number of parts
        self._spans: list[tuple[int, int]] = []
        at = 0
        for c in made:
            self._spans.append((at, len(c.state_names)))
            at += len(c.state_names)
        self.state_names = tuple(f"{n}_{k}" for k, c in enumerate(made)   # type: ignore[misc]
                                 for n in c.state_names)
        self.output_part = self._spans[-1][0] + made[-1].output_part
        self._keys = [{n: f"cells.{k}.{n}" for n in self._names(c, k)} for k, c in enumerate(made)]

    def _names(self, cell: Cell, k: int) -> list[str]:
        return [p.name for p in cell.params(self._in_dim(k) if k else 1)]

    def _in_dim(self, k: int) -> int:
        return self.cells[k - 1].output_size

    def check(self, where: str) -> None:
        for c in self.cells:
            c.check(where)
            kernels.check(c, where)   # (each cell's compiled step runs in the whole-sequence form)

    def check_init(self, init: Arrays, where: str) -> None:
        for c, (a, n) in zip(self.cells, self._spans, strict=True):
            c.check_init(init[a:a + n], where)

    # -- declarations --------------------------------------------------------------------------
    def params(self, input_dim: int) -> list[Param]:
        out = []
        for k, c in enumerate(self.cells):
            for p in c.params(input_dim if k == 0 else self._in_dim(k)):
                out.append(Param(f"cells.{k}.{p.name}", p.shape, p.init, p.trainable))
        return out

    def state_sizes(self) -> tuple[int, ...]:
        return tuple(n for c in self.cells for n in c.state_sizes())

    def get_config(self) -> dict[str, Any]:
        return {"cells": [cell_to_config(c) for c in self.cells]}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> Cell:
        return cls(**config)

    # -- arithmetic ----------------------------------------------------------------------------
    def _w(self, w: Mapping[str, np.ndarray], k: int) -> dict[str, np.ndarray]:
        return {n: w[key] for n, key in self._keys[k].items()}

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        x = inp
        new: list[np.ndarray] = []
        for k, c in enumerate(self.cells):
            wk = self._w(w, k)
            a, n = self._spans[k]
            sub: dict[str, np.ndarray] | None = None if park is None else {}
            if park is not None:
                park[f"cells.{k}.x"] = x
            inp_k = x
            if c.input_kernel is not None:
                inp_k = x @ wk[c.input_kernel]
                if c.bias is not None:
                    inp_k = inp_k + wk[c.bias][0]
            out = c.step(wk, inp_k, prev[a:a + n], sub)
            if park is not None and sub is not None:
                park.update({f"cells.{k}.{name}": v for name, v in sub.items()})
            new.extend(out)
            x = out[c.output_part]
        return tuple(new)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> StepBack:
        d_prev: list[Arrays] = [()] * len(self.cells)
        grads: dict[str, np.ndarray] = {}
        dx: np.ndarray | None = None     # dL/d(input of the cell above) = dL/d(this cell's output)
        for k in range(len(self.cells) - 1, -1, -1):
            c = self.cells[k]
            wk = self._w(w, k)
            a, n = self._spans[k]
            dk = list(d[a:a + n])
            if dx is not None:
                dk[c.output_part] = dk[c.output_part] + dx
            x = park[f"cells.{k}.x"]
            pre = f"cells.{k}."
            sub = {name[len(pre):]: v for name, v in park.items() if name.startswith(pre)}
            r = c.step_back(wk, tuple(dk), x if c.input_kernel is None else None, prev[a:a + n],
                            new[a:a + n], sub)
            d_prev[k] = tuple(r.d_prev)
            drec = r.d_inp if r.d_rec is None else r.d_rec
            if c.input_kernel is not None:
                grads[f"{pre}{c.input_kernel}"] = x.T @ r.d_inp
                dx = r.d_inp @ wk[c.input_kernel].T
            else:
                dx = r.d_inp
            if c.bias is not None:
                b = wk[c.bias]
                db = np.empty(b.shape, r.d_inp.dtype)
                db[0] = r.d_inp.sum(axis=0)
                if b.shape[0] == 2:
                    db[1] = drec.sum(axis=0)
                grads[f"{pre}{c.bias}"] = db
            if c.recurrent_kernel is not None:
                U = wk[c.recurrent_kernel]
                dU = np.empty(U.shape, r.d_inp.dtype)
                for src, c0, c1 in c.rec_groups(U.shape[1]):
                    P = prev[a + c.state_names.index(src)] if src in c.state_names else sub[src]
                    dU[:, c0:c1] = P.T @ drec[:, c0:c1]
                grads[f"{pre}{c.recurrent_kernel}"] = dU
            for name, v in (r.params or {}).items():
                grads[f"{pre}{name}"] = np.asarray(v)
        assert dx is not None
        return StepBack(tuple(p for part in d_prev for p in part), dx, None, grads)

    # -- the whole-sequence form: each cell walked over the whole sequence in turn -------------
    def sequence_forward(self, w: Mapping[str, np.ndarray], inp: np.ndarray, init: Arrays,
                         park: dict[str, np.ndarray] | None, mask: np.ndarray | None = None) -> Arrays:
        """Cell 0 walked over ``inp`` (the stack's input x (T, B, F)) from its part of ``init``,
        then cell ``k`` over cell ``k-1``'s outputs, each by :func:`~rnnkit.recurrent._walker.walk`
        under ``mask``. Returns the output part (the last cell's) of every step (T, B, out) and
        every other part's final state (1, B, size); ``park`` gets each cell's walk cache."""
        x = inp
        parts: list[np.ndarray] = []
        for k, c in enumerate(self.cells):
            a, n = self._spans[k]
            seq, final, cache = walk(c, self._w(w, k), x, init[a:a + n], park is not None, True, mask)
            assert seq is not None
            if park is not None:
                assert cache is not None
                park.update({f"cells.{k}.states.{j}": s for j, s in enumerate(cache.states)})
                park.update({f"cells.{k}.parks.{name}": v for name, v in cache.parks.items()})
            parts.extend(f[None] for f in final)
            x = np.ascontiguousarray(seq)   # (an inference walk's is a view of its (B, T, out) output)
        parts[self.output_part] = x
        return tuple(parts)

    def sequence_backward(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None,
                          init: Arrays, states: Arrays, park: Mapping[str, np.ndarray],
                          mask: np.ndarray | None = None) -> SequenceBack:
        """The cells' backward walks (:func:`~rnnkit.recurrent._walker.walk_back`) from the last
        to the first, over the caches :meth:`sequence_forward` parked: the last cell's output
        gradient is ``d``'s output part (T, B, out), cell ``k``'s is cell ``k+1``'s input
        gradient, and each cell's final-state gradient is its parts of ``d`` (the last step's)."""
        assert inp is not None
        T = inp.shape[0]
        last = len(self.cells) - 1
        d_init: list[Arrays] = [()] * len(self.cells)
        grads: dict[str, np.ndarray] = {}
        g = d[self.output_part]                     # (T, B, out): every step's output gradient
        for k in range(last, -1, -1):
            c = self.cells[k]
            a, n = self._spans[k]
            o = c.output_part
            x = inp if k == 0 else park[f"cells.{k - 1}.states.{self.cells[k - 1].output_part}"][1:]
            pre = f"cells.{k}.parks."
            cache = WalkCache(x, [park[f"cells.{k}.states.{j}"] for j in range(n)],
                              {name[len(pre):]: v for name, v in park.items() if name.startswith(pre)},
                              mask, None, "sequence" if sequence_form(c, T, mask, None) else "step")
            d_final = tuple(np.zeros_like(d[a + j][0]) if k == last and j == o else d[a + j][0]
                            for j in range(n))   # (the last cell's output part: in g's last row)
            dx, gk, d_init[k] = walk_back(c, self._w(w, k), cache, g.transpose(1, 0, 2), True, d_final)
            assert dx is not None
            g = dx                                  # (T, B, the input width of cell k)
            grads.update({f"cells.{k}.{name}": v for name, v in gk.items()})
        return SequenceBack(tuple(p for part in d_init for p in part), g, None, grads)
