"""The tch-rs ``nn::rnn`` face: ``lstm``/``gru`` networks in PyTorch layout with the RNN trait
(``zero_state``, ``step``, ``seq``, ``seq_init``)."""

from rnnkit.recurrent import GRUState, LSTMState
from rnnkit.rnn._config import Init, RNNConfig
from rnnkit.rnn._net import RNNNet, gru, lstm

__all__ = ["GRUState", "Init", "LSTMState", "RNNConfig", "RNNNet", "gru", "lstm"]
