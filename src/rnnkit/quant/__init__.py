"""int8 inference: ``rnnkit.quantize(model)`` and the int8 layers it makes.

Weights: int8 per output channel (symmetric, scale ``max|w| / 127``); activations: every row
quantized on its own at every step (dynamic, asymmetric uint8 with a zero point); int32
accumulation, dequantization, float32 bias and gates. :mod:`rnnkit.kernels._int8` states the
arithmetic; :mod:`rnnkit.quant._reference` is the same in NumPy.
"""

from __future__ import annotations

from rnnkit.layers import register_layer
from rnnkit.quant._convert import quantize, quantize_layer
from rnnkit.quant._layers import QuantizedDense, QuantizedRecurrent

register_layer(QuantizedDense)
register_layer(QuantizedRecurrent)

__all__ = ["QuantizedDense", "QuantizedRecurrent", "quantize", "quantize_layer"]
