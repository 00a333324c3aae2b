"""Recurrent layers: one walker (``_walker``) over small cells (``_simple_rnn``, ``_lstm``,
``_gru``, xLSTM's ``_xlstm``, or a user's own :class:`Cell`)."""

from rnnkit.recurrent._base import RecurrentLayer
from rnnkit.recurrent._cell import Cell, Param, SequenceBack, StepBack
from rnnkit.recurrent._gru import GRUCell, GRUResetAfterCell
from rnnkit.recurrent._layers import GRU, LSTM, SimpleRNN
from rnnkit.recurrent._lstm import LSTMCell
from rnnkit.recurrent._min_gru import MinGRUCell
from rnnkit.recurrent._min_layers import MinGRU, MinLSTM
from rnnkit.recurrent._min_lstm import MinLSTMCell
from rnnkit.recurrent._registry import register_cell
from rnnkit.recurrent._rnn import RNN
from rnnkit.recurrent._simple_rnn import SimpleRNNCell
from rnnkit.recurrent._stacked import StackedRNNCells
from rnnkit.recurrent._states import GRUState, LSTMState, SimpleRNNState
from rnnkit.recurrent._xlstm import MLSTM, SLSTM, MLSTMCell, SLSTMCell

__all__ = ["GRU", "LSTM", "SimpleRNN", "RecurrentLayer", "Cell", "Param", "SequenceBack", "StepBack",
           "GRUCell", "GRUResetAfterCell", "LSTMCell", "SimpleRNNCell", "register_cell", "GRUState",
           "LSTMState", "SimpleRNNState", "RNN", "SLSTM", "MLSTM", "SLSTMCell", "MLSTMCell",
           "MinGRU", "MinLSTM", "MinGRUCell", "MinLSTMCell", "StackedRNNCells"]
