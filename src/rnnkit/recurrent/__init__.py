"""Recurrent layers: one walker (``_walker``) over small cells (``_simple_rnn``, ``_lstm``,
``_gru``, or a user's own :class:`Cell`)."""

from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._cell import Cell, Param, StepBack
from rnnkit.recurrent._gru import GRUCell, GRUResetAfterCell
from rnnkit.recurrent._layers import GRU, LSTM, SimpleRNN
from rnnkit.recurrent._lstm import LSTMCell
from rnnkit.recurrent._registry import register_cell
from rnnkit.recurrent._rnn import RNN
from rnnkit.recurrent._simple_rnn import SimpleRNNCell
from rnnkit.recurrent._stacked import StackedRNNCells
from rnnkit.recurrent._states import GRUState, LSTMState, SimpleRNNState

__all__ = ["GRU", "LSTM", "SimpleRNN", "RecurrentLayer", "Cell", "Param", "StepBack", "GRUCell",
           "GRUResetAfterCell", "LSTMCell", "SimpleRNNCell", "register_cell", "GRUState", "LSTMState",
           "SimpleRNNState", "RNN", "StackedRNNCells"]
