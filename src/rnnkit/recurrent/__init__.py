"""Recurrent layers: one walker (``_walker``) over three cells (``_simple_rnn``, ``_lstm``, ``_gru``)."""

from rnnkit.recurrent._layers import GRU, LSTM, SimpleRNN
from rnnkit.recurrent._walker import GRUState, LSTMState, RecurrentLayer

__all__ = ["GRU", "LSTM", "SimpleRNN", "GRUState", "LSTMState", "RecurrentLayer"]
