"""Whole networks in PyTorch layout: ``lstm`` / ``gru`` / ``rnn`` (PyTorch's ``nn.LSTM`` /
``nn.GRU`` / ``nn.RNN``), run whole or step by step (``zero_state``, ``step``, ``seq``, ``seq_init``)."""

from rnnkit.recurrent import GRUState, LSTMState, SimpleRNNState
from rnnkit.rnn._config import MAX_LAYERS, Init, RNNConfig
from rnnkit.rnn._net import RNNNet, gru, lstm, rnn

__all__ = ["GRUState", "Init", "LSTMState", "MAX_LAYERS", "RNNConfig", "RNNNet", "SimpleRNNState", "gru",
           "lstm", "rnn"]
