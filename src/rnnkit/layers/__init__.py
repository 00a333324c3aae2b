"""Non-recurrent layers (Dense, Embedding, RepeatVector, Reverse, Concatenate, Dropout,
ActivationLayer) and the layer registry that covers every layer, recurrent ones included."""

from rnnkit.layers._dense import ActivationLayer, Dense
from rnnkit.layers._dropout import Dropout
from rnnkit.layers._embedding import Embedding
from rnnkit.layers._merge import Concatenate, MergeLayer
from rnnkit.layers._registry import layer_from_config, layer_to_config, register_layer
from rnnkit.layers._reshape import RepeatVector, Reverse
from rnnkit.recurrent import GRU, LSTM, SimpleRNN

__all__ = [
    "ActivationLayer", "Concatenate", "Dense", "Dropout", "Embedding", "MergeLayer",
    "RepeatVector", "Reverse", "GRU", "LSTM", "SimpleRNN",
    "layer_from_config", "layer_to_config", "register_layer",
]
