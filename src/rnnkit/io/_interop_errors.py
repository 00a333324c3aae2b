"""Errors of the Keras / PyTorch file importers."""

from __future__ import annotations

from rnnkit._errors import Error, InvalidParameterError


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
