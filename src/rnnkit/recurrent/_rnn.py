"""``RNN``: Keras' ``keras.layers.RNN(cell, ...)`` — the walker over any one cell, with Keras'
arguments, defaults and config.

It is :class:`~rnnkit.RecurrentLayer` under Keras' name and argument order: a built-in cell
(``LSTMCell``, ``GRUCell``, ``SimpleRNNCell``) runs the compiled walk exactly as the dedicated
layer (``RNN(LSTMCell(4))`` computes what ``LSTM(4)`` computes, weights and gradients
included); a user's :class:`~rnnkit.Cell` runs its reference arithmetic.
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidParameterError
from rnnkit._layer import check_bool
from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._cell import Cell
from rnnkit.recurrent._stacked import StackedRNNCells


class RNN(RecurrentLayer):
    """``RNN(cell, return_sequences=False, return_state=False, go_backwards=False,
    stateful=False, unroll=False, zero_output_for_mask=False, *, dropout=0.0,
    recurrent_dropout=0.0, seed=None, dtype="float32", input_dim=None, name=None)``: Keras'
    ``RNN`` layer over one cell (an :class:`~rnnkit.Cell`, or its ``{"class_name", "config"}``
    from a model file).

    Input (B, T, F); output (B, out), or (B, T, out) with ``return_sequences``; with
    ``return_state`` the list ``[output, *final state parts]``; an input list ``[x, *initial
    state parts]`` starts from that state. ``stateful`` carries the final state to the next
    call (``reset_states()`` clears it). Masks as :class:`~rnnkit.RecurrentLayer`: a masked
    step carries the state and repeats the previous output (Keras' ``zero_output_for_mask=False``).

    - ``unroll``: Keras' choice between a loop and an unrolled graph; the values are the
      same either way, so it changes nothing here (kept in the config).
    - ``zero_output_for_mask=True`` (zeros at the masked steps of a boolean mask) is refused
      with InvalidParameterError; ``lengths=`` (PyTorch's packed sequences) gives zeros past
      each sequence's end.
    - A list of cells (Keras' ``RNN([cell, cell])``) is their :class:`~rnnkit.StackedRNNCells`:
      the output is the last cell's, the states are every cell's parts in Keras' order (all of
      the first cell's, then the next cell's, ...) in ``return_state`` and ``initial_state``;
      a pass of two steps or more walks each cell in turn, compiled where the cell is.
    """

    def __init__(self, cell: Cell | dict[str, Any] | list[Cell] | tuple[Cell, ...],
                 return_sequences: bool = False, return_state: bool = False, go_backwards: bool = False,
                 stateful: bool = False, unroll: bool = False, zero_output_for_mask: bool = False, *,
                 name: str | None = None, **kwargs: Any) -> None:
        where = "RNN" if name is None else name
        if isinstance(cell, (list, tuple)):   # Keras: a list of cells is their StackedRNNCells
            cell = StackedRNNCells(cell)
        self.unroll = check_bool(unroll, "unroll", where)
        if check_bool(zero_output_for_mask, "zero_output_for_mask", where):
            raise InvalidParameterError(
                f"{where}: zero_output_for_mask=True is not supported (expected False: a masked step "
                f"repeats the previous output, Keras' default); give lengths= for zeros past each end")
        super().__init__(cell, return_sequences=return_sequences, return_state=return_state,
                         go_backwards=go_backwards, stateful=stateful, name=where, **kwargs)

    def get_config(self) -> dict[str, Any]:
        """Keras' ``RNN`` config: ``{"cell": {"class_name", "config"}, "return_sequences", ...}``
        (``unroll`` only when True)."""
        cfg = super().get_config()
        if self.unroll:
            cfg["unroll"] = True
        return cfg
