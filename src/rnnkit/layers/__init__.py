"""Non-recurrent layers (Dense, Embedding, Masking, RepeatVector, Reverse, Concatenate, Add,
Multiply, Average, Dropout, ActivationLayer, LayerNormalization, BatchNormalization, Conv1D,
ConvLSTM1D, ConvLSTM2D, the
pooling / padding layers over time, Attention, AdditiveAttention, MultiHeadAttention, and the shape
layers and wrappers Flatten, Reshape, Permute, SpatialDropout1D, GaussianNoise, Subtract, Maximum,
Minimum, Dot, TimeDistributed, Lambda) and the
layer registry that covers every layer, recurrent ones included."""

from rnnkit.layers._attention import AdditiveAttention, Attention
from rnnkit.layers._bidirectional import Bidirectional
from rnnkit.layers._conv import Conv1D
from rnnkit.layers._conv_lstm import ConvLSTM1D, ConvLSTM2D
from rnnkit.layers._dense import ActivationLayer, Dense
from rnnkit.layers._dropout import Dropout
from rnnkit.layers._embedding import Embedding
from rnnkit.layers._group_norm import GroupNormalization
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
from rnnkit.recurrent import GRU, LSTM, MLSTM, RNN, SLSTM, MinGRU, MinLSTM, RecurrentLayer, SimpleRNN

# the shape layers and wrappers (Keras 3's)
from rnnkit.layers._merge import Dot, Maximum, Minimum, Subtract  # isort: skip
from rnnkit.layers._noise import GaussianNoise, SpatialDropout1D  # isort: skip
from rnnkit.layers._shaping import Flatten, Permute, Reshape  # isort: skip
from rnnkit.layers._wrappers import Lambda, TimeDistributed  # isort: skip

for _cls in (Dense, ActivationLayer, Embedding, RepeatVector, Reverse, Concatenate, Dropout, Masking, Add,
             Multiply, Average, Bidirectional, SimpleRNN, LSTM, GRU, MinGRU, MinLSTM, RecurrentLayer,
             LayerNormalization,
             Conv1D, MaxPooling1D, AveragePooling1D, GlobalAveragePooling1D, GlobalMaxPooling1D,
             ZeroPadding1D, Cropping1D, UpSampling1D, BatchNormalization, Attention, AdditiveAttention,
             MultiHeadAttention, SLSTM, MLSTM, ConvLSTM1D, ConvLSTM2D):
    register_layer(_cls)
for _shaping in (Flatten, Reshape, Permute, SpatialDropout1D, GaussianNoise, Subtract, Maximum, Minimum, Dot,
                 TimeDistributed, Lambda):
    register_layer(_shaping)
# Keras' RNN over one cell, GroupNormalization (issue 39's block)
register_layer(RNN)
register_layer(GroupNormalization)

__all__ = [
    "GroupNormalization",  # issue 39
    "ActivationLayer", "Add", "AdditiveAttention", "Attention", "Average", "Bidirectional", "Concatenate",
    "Dense", "Dropout", "Embedding", "LayerNormalization", "Conv1D", "MaxPooling1D", "AveragePooling1D",
    "GlobalAveragePooling1D", "GlobalMaxPooling1D", "ZeroPadding1D", "Cropping1D", "UpSampling1D",
    "Masking", "MergeLayer", "MultiHeadAttention", "Multiply", "BatchNormalization",
    "RepeatVector", "Reverse", "GRU", "LSTM", "SimpleRNN",
    "layer_from_config", "layer_to_config", "register_layer",
]
__all__ += ["Dot", "Flatten", "GaussianNoise", "Lambda", "Maximum", "Minimum", "Permute", "Reshape",
            "SpatialDropout1D", "Subtract", "TimeDistributed"]
__all__ += ["ConvLSTM1D", "ConvLSTM2D"]
