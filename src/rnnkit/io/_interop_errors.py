"""Errors of the Keras / PyTorch file importers."""

from __future__ import annotations

from collections.abc import Iterable

from rnnkit._errors import Error, InvalidParameterError
from rnnkit._layer import Layer
from rnnkit.quant import QuantizedDense, QuantizedRecurrent


class UnsupportedFeatureError(InvalidParameterError):
    """A foreign model uses a layer or an option rnnkit cannot reproduce exactly.

    ``.layer`` names the foreign layer (its name in the file), ``.option`` the layer class or
    option that was refused (``"recurrent_activation"``, ``"stateful"``, ``"class_name"``, ...).
    """

    def __init__(self, layer: str, option: str, message: str) -> None:
        self.layer = layer
        self.option = option
        super().__init__(f"layer {layer!r}: {option}: {message}")


class MissingDependencyError(Error, ImportError):
    """An optional dependency of an importer is not installed; the message says what to install."""


def refuse_int8(layers: Iterable[Layer], where: str) -> None:
    """UnsupportedFeatureError naming the first int8 layer of ``layers`` (``rk.quantize``'s; a
    ``Bidirectional``'s directions included): its int8 weights and per-row activation
    quantization have no exact Keras, PyTorch or ONNX layer, so ``where`` (an exporter) writes
    the float model, never an approximation."""
    for layer in layers:
        inner = [layer, *(getattr(layer, d, None) for d in ("forward_layer", "backward_layer"))]
        for lay in inner:
            if isinstance(lay, (QuantizedDense, QuantizedRecurrent)):
                raise UnsupportedFeatureError(
                    lay.name, type(lay).__name__,
                    f"{where}: an int8 layer (rk.quantize) has no exact equivalent in that format; "
                    f"export the float model it was quantized from")
