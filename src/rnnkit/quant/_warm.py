"""Compiling the int8 inference loops of a cell ahead, in a child process (``python -m
rnnkit.quant._warm DESCRIPTION int8``), as :mod:`rnnkit.kernels._warm` compiles a float cell's
walks: ``rnnkit compile`` (and so an editable install) runs one per cell that has an int8 form,
so that the first ``predict`` of a quantized model loads its loops from the on-disk cache.

The loops of :mod:`rnnkit.kernels._int8` take the same argument types whatever the sizes, but
not whatever the layouts: Numba compiles a version of a loop for each layout ('C', 'F' or 'A')
of its arguments, and the recurrent layer hands its loop a time-major view of the input ('A'
for several rows of several steps; 'C' for one row, one step, a masked input, or one feature,
copied) and of the outputs ('A' when it returns sequences, 'C' otherwise). One run of each
case of :data:`CASES` (zero inputs) compiles the four versions, and ``QuantizedDense``'s
product; and the spin waits of the hand-off to the worker threads, which run a batch of many
rows in blocks (a pass of 2 rows does not split). The marker of the part ``int8`` records it, as
the float parts' markers do.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rnnkit import kernels
from rnnkit._errors import InvalidParameterError
from rnnkit._shape import Shape
from rnnkit.kernels import _threads, _warm
from rnnkit.layers import Dense
from rnnkit.models import Sequential
from rnnkit.quant._convert import quantize
from rnnkit.recurrent import RecurrentLayer

#: the one part this module compiles
PARTS = ("int8",)


#: the inputs of :func:`exercise`, as (rows, steps, features, return_sequences), and the layouts
#: of the recurrent loop's input and outputs each gives it
CASES = ((2, 2, 2, False),    # input 'A', outputs 'C' (a last recurrent layer)
         (2, 2, 2, True),     # input 'A', outputs 'A' (a recurrent layer under another)
         (1, 2, 2, False),    # input 'C', outputs 'C' (one row)
         (2, 2, 1, True))     # input 'C', outputs 'A' (one feature: the layer copies it)


def exercise(cell: Any) -> None:
    """Quantize ``RecurrentLayer(cell)`` followed by ``Dense(1)`` and run it on each input of
    :data:`CASES` (zeros): its int8 loops are compiled (or loaded) now, in every layout a
    quantized model hands them, with the worker threads' spin waits. ``cell`` must be float32
    and have an int8 form (the InvalidParameterError of :func:`rnnkit.quantize` otherwise)."""
    if np.dtype(cell.dtype) != np.float32:
        raise InvalidParameterError(f"rnnkit.quant._warm.exercise: the int8 loops need a float32 cell, "
                                    f"got {np.dtype(cell.dtype).name}")
    if kernels.int8() is not None:
        _threads.warm_hand_off()
    config = cell.get_config()
    for rows, steps, features, sequences in CASES:
        model = Sequential([RecurrentLayer(type(cell).from_config(config), return_sequences=sequences),
                            Dense(1)])
        model.build(Shape.with_free_batch((rows, steps, features)))
        quantize(model).predict(np.zeros((rows, steps, features), np.float32), verbose=0)


def run(desc: str, parts: tuple[str, ...]) -> None:
    """Compile the int8 loops of :func:`rnnkit.kernels._warm.describe`'s ``desc`` (``parts``:
    :data:`PARTS`) into the on-disk cache and write the part's marker."""
    if tuple(parts) != PARTS:
        raise InvalidParameterError(f"rnnkit.quant._warm: parts must be {','.join(PARTS)!r}, "
                                    f"got {','.join(parts)!r}")
    cell, _, _ = _warm.rebuild(desc)
    exercise(cell)
    _warm.mark(desc, "int8")


def main(argv: list[str]) -> int:
    """The child: ``python -m rnnkit.quant._warm DESCRIPTION int8``."""
    desc, parts = argv
    run(desc, tuple(parts.split(",")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
