"""Running a recurrent layer step by step, and the state it carries: ``zero_state``, ``step``,
``seq``, ``seq_init`` (recorded in a training ``Ctx`` for gradients), ``stateful`` layers."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._budget import check_array
from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError
from rnnkit._layer import check_positive_int
from rnnkit.recurrent._cell import Arrays


class Streaming:
    """Mixin of :class:`~rnnkit.RecurrentLayer`: explicit states, for streaming inference."""

    # provided by RecurrentLayer / Layer
    cell: Any
    name: str
    dtype: np.dtype
    stateful: bool
    _state: Arrays | None

    def zero_state(self, batch: int) -> Any:
        """The all-zero state for ``batch`` sequences (the cell's state type)."""
        b = check_positive_int(batch, "batch", self.name)
        sizes = self.cell.state_sizes()
        check_array((b, sum(sizes)), self.dtype.itemsize, f"{self.name}.zero_state({b}), its states together")
        return self.cell.make_state(tuple(np.zeros((b, n), self.dtype) for n in sizes))

    def step(self, x: Any, state: Any) -> Any:
        """Advance ``state`` by one timestep of input ``x`` (B, F); inference, records nothing."""
        arr = self._as_input(x)  # type: ignore[attr-defined]
        if arr.ndim != 2:
            raise InvalidInputError(
                f"{self.name}.step: expected one timestep (batch, features), got shape {arr.shape}"
            )
        _, final = self.seq_init(arr[:, None, :], state)
        return final

    def seq(self, x: Any, ctx: Ctx | None = None) -> tuple[np.ndarray, Any]:
        """Run from the zero state: (every output in processing order (B, T, out), final state)."""
        return self.seq_init(x, None, ctx)

    def seq_init(self, x: Any, state: Any, ctx: Ctx | None = None) -> tuple[np.ndarray, Any]:
        """Run from ``state`` (``None`` = zeros): (sequence (B, T, out), final state). Any number
        of timesteps. In a training ``ctx`` the pass is recorded:
        ``layer.backward((d_seq, d_final_state), ctx)`` then returns ``(dx, d_state)`` (the
        gradient of ``state``, None when it was None) and puts the weight gradients in ``ctx``;
        ``d_final_state`` may be None."""
        c = Ctx.inference() if ctx is None else ctx
        out, final = self._pass(x, state, c, True, "seq", check_steps=False)  # type: ignore[attr-defined]
        return out, self.cell.make_state(final)

    def unpack_state(self, state: Any, batch: int) -> Arrays:
        """The parts of ``state`` (the cell's state type, or a plain tuple or list of its parts)
        as arrays of this layer's dtype, each checked against (batch, width)."""
        cls = type(self.cell.make_state(tuple(np.empty(0) for _ in self.cell.state_names)))
        names = self.cell.state_names
        if isinstance(state, list):
            state = tuple(state)
        if not isinstance(state, tuple) or not (type(state) is tuple or isinstance(state, cls)) \
                or len(state) != len(names):
            raise InvalidInputError(
                f"{self.name}: expected a {cls.__name__} ({', '.join(names)}) as state, got "
                f"{type(state).__name__}")
        parts = tuple(self._as_input(p, "state") for p in state)  # type: ignore[attr-defined]
        for name, a, n in zip(names, parts, self.cell.state_sizes(), strict=True):
            if a.shape != (batch, n):
                raise InvalidInputError(
                    f"{self.name}: state {name!r} must have shape {(batch, n)}, got {a.shape}")
        return parts

    # -- stateful ----------------------------------------------------------------------------
    @property
    def states(self) -> Any:
        """A stateful layer's carried state (the cell's state type), or None before the first
        call and after :meth:`reset_state`."""
        return None if self._state is None else self.cell.make_state(self._state)

    def reset_state(self, state: Any = None) -> None:
        """Forget the carried state (the next call starts from zeros), or set it to ``state``."""
        if not self.stateful:
            raise InvalidInputError(f"{self.name}: reset_state applies to a stateful layer (stateful=True)")
        if state is None:
            self._state = None
        else:
            first = state[0] if isinstance(state, (tuple, list)) else None
            self._state = self.unpack_state(state, int(np.shape(first)[0]) if first is not None else 0)

    def reset_states(self, states: Any = None) -> None:
        """Keras' spelling of :meth:`reset_state` (the next call starts from zeros, or from
        ``states``)."""
        self.reset_state(states)

    def _carried_state(self, batch: int) -> Arrays | None:
        if not self.stateful or self._state is None:
            return None
        if self._state[0].shape[0] != batch:
            raise InvalidInputError(
                f"{self.name}: a stateful layer carries the state of {self._state[0].shape[0]} sequences, "
                f"this batch has {batch}; keep the batch size fixed, or call reset_state()")
        return self._state
