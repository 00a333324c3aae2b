"""Activations, public: what a layer's ``activation=`` and a cell's ``self.activation`` are.

An activation is given as a string (``"tanh"``, ``"sigmoid"``, ``"relu"``, ``"linear"``,
``"softmax"``, ``"hard_sigmoid"``), an :class:`Activation` member or a wrapper object
(``Tanh()``, ``Softmax(axis=-1)`` ...); :func:`get` turns any of them into an
:class:`ActivationFn`, the resolved form a cell holds: ``fn(a, out=None)`` maps
pre-activations, ``fn.vjp(y, g)`` maps the gradient ``g = dL/dy`` back to ``dL/da`` from the
OUTPUT ``y`` (what a cell parks for backward). The table of definitions and derivatives is in
:mod:`rnnkit._activations`.
"""

from rnnkit._activations import (
    Activation,
    ActivationFn,
    ActivationLike,
    HardSigmoid,
    Linear,
    ReLU,
    Sigmoid,
    Softmax,
    Tanh,
)
from rnnkit._activations import resolve_activation as get

__all__ = ["Activation", "ActivationFn", "ActivationLike", "HardSigmoid", "Linear", "ReLU", "Sigmoid",
           "Softmax", "Tanh", "get"]
