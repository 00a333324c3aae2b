"""Compiling the int8 inference loops of a cell ahead, in a child process (``python -m
rnnkit.quant._warm DESCRIPTION int8``), as :mod:`rnnkit.kernels._warm` compiles a float cell's
walks: ``rnnkit compile`` (and so an editable install) runs one per cell that has an int8 form,
so that the first ``predict`` of a quantized model loads its loops from the on-disk cache.

The loops of :mod:`rnnkit.kernels._int8` take the same argument types whatever the sizes, so
one run on 2 zero rows of 2 steps compiles every version a quantized model of that cell uses
(the recurrent layer's loop and ``QuantizedDense``'s product). The marker of the part ``int8``
records it, as the float parts' markers do.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._shape import Shape
from rnnkit.kernels import _warm
from rnnkit.layers import Dense
from rnnkit.models import Sequential
from rnnkit.quant._convert import quantize
from rnnkit.recurrent import RecurrentLayer

#: the one part this module compiles
PARTS = ("int8",)


def exercise(cell: Any, input_dim: int) -> None:
    """Quantize ``RecurrentLayer(cell)`` followed by ``Dense(1)`` (built for inputs of
    ``input_dim`` features) and run it on 2 zero rows of 2 steps: its int8 loops are compiled
    (or loaded) now. ``cell`` must be float32 and have an int8 form (the InvalidParameterError
    of :func:`rnnkit.quantize` otherwise)."""
    if np.dtype(cell.dtype) != np.float32:
        raise InvalidParameterError(f"rnnkit.quant._warm.exercise: the int8 loops need a float32 cell, "
                                    f"got {np.dtype(cell.dtype).name}")
    model = Sequential([RecurrentLayer(cell), Dense(1)])
    model.build(Shape.with_free_batch((2, 2, int(input_dim))))
    quantize(model).predict(np.zeros((2, 2, int(input_dim)), np.float32), verbose=0)


def main(argv: list[str]) -> int:
    """The child: ``python -m rnnkit.quant._warm DESCRIPTION int8``."""
    desc, parts = argv
    if parts.split(",") != list(PARTS):
        raise InvalidParameterError(f"rnnkit.quant._warm: parts must be {','.join(PARTS)!r}, got {parts!r}")
    cell, input_dim, _ = _warm.rebuild(desc)
    exercise(cell, input_dim)
    _warm.mark(desc, "int8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
