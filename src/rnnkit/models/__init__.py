"""Models: ``Sequential`` / ``SequentialBuilder``, ``GraphBuilder`` / ``GraphModel``, the
training loop (``compile``, ``fit``, ``evaluate``, ``predict``), the callbacks and
``model_from_config``. The other spellings (``SequentialBuilder``, ``fit_with_batches``) are thin
aliases, all in :mod:`rnnkit.models._aliases`."""

from rnnkit.models._base import Model
from rnnkit.models._callbacks import (
    Callback,
    EarlyStopping,
    History,
    LearningRateScheduler,
    ModelCheckpoint,
)
from rnnkit.models._callbacks_more import (
    CSVLogger,
    LambdaCallback,
    ProgbarLogger,
    ReduceLROnPlateau,
    TerminateOnNaN,
)
from rnnkit.models._config import model_from_config
from rnnkit.models._functional import Input
from rnnkit.models._functional import Model as FunctionalModel
from rnnkit.models._graph import GraphBuilder, GraphModel, Node
from rnnkit.models._node import InputLayer
from rnnkit.models._sequential import Sequential, SequentialBuilder

__all__ = [
    "Callback", "EarlyStopping", "GraphBuilder", "GraphModel", "History", "LearningRateScheduler",
    "Model", "ModelCheckpoint", "Node", "Sequential", "SequentialBuilder", "model_from_config",
    "CSVLogger", "LambdaCallback", "ProgbarLogger", "ReduceLROnPlateau", "TerminateOnNaN",
    "Input", "FunctionalModel", "InputLayer",
]
