"""Non-recurrent layers (Dense, Embedding, Masking, RepeatVector, Reverse, Concatenate, Add,
Multiply, Average, Dropout, ActivationLayer, LayerNormalization, BatchNormalization, Conv1D, the
pooling / padding layers over time, Attention, AdditiveAttention and MultiHeadAttention) and the
layer registry that covers every layer, recurrent ones included."""

from rnnkit.layers._attention import AdditiveAttention, Attention
from rnnkit.layers._bidirectional import Bidirectional
from rnnkit.layers._conv import Conv1D
from rnnkit.layers._dense import ActivationLayer, Dense
from rnnkit.layers._dropout import Dropout
from rnnkit.layers._embedding import Embedding
from rnnkit.layers._masking import Masking
from rnnkit.layers._merge import Add, Average, Concatenate, MergeLayer, Multiply
from rnnkit.layers._mha import MultiHeadAttention
from rnnkit.layers._normalization import BatchNormalization, LayerNormalization
from rnnkit.layers._pooling import (
    AveragePooling1D,
    Cropping1D,
    GlobalAveragePooling1D,
    GlobalMaxPooling1D,
    MaxPooling1D,
    UpSampling1D,
    ZeroPadding1D,
)
from rnnkit.layers._registry import layer_from_config, layer_to_config, register_layer
from rnnkit.layers._reshape import RepeatVector, Reverse
from rnnkit.recurrent import GRU, LSTM, MinGRU, MinLSTM, RecurrentLayer, SimpleRNN

for _cls in (Dense, ActivationLayer, Embedding, RepeatVector, Reverse, Concatenate, Dropout, Masking, Add,
             Multiply, Average, Bidirectional, SimpleRNN, LSTM, GRU, MinGRU, MinLSTM, RecurrentLayer,
             LayerNormalization,
             Conv1D, MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D, GlobalMaxPooling1D,
             ZeroPadding1D, Cropping1D, UpSampling1D, BatchNormalization, Attention, AdditiveAttention,
             MultiHeadAttention):
    register_layer(_cls)

__all__ = [
    "ActivationLayer", "Add", "AdditiveAttention", "Attention", "Average", "Bidirectional", "Concatenate",
    "Dense", "Dropout", "Embedding", "LayerNormalization", "Conv1D", "MaxPooling1D", "AveragePooling1D",
    "GlobalAveragePooling1D", "GlobalMaxPooling1D", "ZeroPadding1D", "Cropping1D", "UpSampling1D",
    "Masking", "MergeLayer", "MultiHeadAttention", "Multiply", "BatchNormalization",
    "RepeatVector", "Reverse", "GRU", "LSTM", "SimpleRNN",
    "layer_from_config", "layer_to_config", "register_layer",
]
