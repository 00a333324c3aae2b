"""One (layer, direction) of an :class:`~rnnkit.rnn.RNNNet` as an rnnkit recurrent layer: made
from the net's PyTorch-named weights (:func:`rnnkit._layouts.from_torch`), and its gradients
given back under PyTorch's names (:func:`rnnkit._layouts.grads_to_torch`)."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._layouts import from_torch, grads_to_torch
from rnnkit.recurrent import GRU, LSTM, RecurrentLayer, SimpleRNN
from rnnkit.rnn._config import RNNConfig


def direction_layer(mode: str, hidden: int, config: RNNConfig, reverse: bool, dtype: np.dtype,
                    weights: dict[str, np.ndarray]) -> RecurrentLayer:
    """The LSTM / GRU (reset after, PyTorch's only form) / SimpleRNN of ``hidden`` units for one
    direction (``reverse``: it reads the sequence backwards), returning its sequence and final
    state, its weights converted from ``weights`` (PyTorch's names without the ``_l{k}``
    suffix: ``weight_ih``, ``weight_hh``, ``bias_ih``, ``bias_hh``, ``weight_hr``)."""
    kw: dict[str, Any] = {"use_bias": config.has_biases, "return_sequences": True, "go_backwards": reverse,
                          "return_state": True, "dtype": dtype}
    layer: RecurrentLayer
    if mode == "lstm":
        layer = LSTM(hidden, proj_size=config.proj_size, **kw)
    elif mode == "gru":
        layer = GRU(hidden, reset_after=True, **kw)
    else:
        layer = SimpleRNN(hidden, config.nonlinearity, **kw)
    layer.set_weights(**from_torch(layer.cell, weights, dtype))
    return layer


def take_torch_grads(layer: RecurrentLayer, ctx: Ctx) -> dict[str, np.ndarray]:
    """Remove ``layer``'s weight gradients from ``ctx``; return them under PyTorch's names
    (without the ``_l{k}`` suffix)."""
    mine = {n: ctx.grads.pop((layer, n)) for n in layer.weight_names}
    return grads_to_torch(layer.cell, mine)
