"""The training callbacks under Keras' module name: ``rnnkit.callbacks.EarlyStopping`` is
``keras.callbacks.EarlyStopping``'s counterpart (each class states its rule; all live in
:mod:`rnnkit.models`, where ``rnnkit.EarlyStopping`` and the others come from too).

``Callback`` is the base class of a custom callback; ``History`` is what ``fit`` returns;
``ProgbarLogger`` is what ``fit(verbose=2)`` prints.
"""

from rnnkit.models import (
    Callback,
    CSVLogger,
    EarlyStopping,
    History,
    LambdaCallback,
    LearningRateScheduler,
    ModelCheckpoint,
    ProgbarLogger,
    ReduceLROnPlateau,
    TerminateOnNaN,
)

__all__ = ["CSVLogger", "Callback", "EarlyStopping", "History", "LambdaCallback", "LearningRateScheduler",
           "ModelCheckpoint", "ProgbarLogger", "ReduceLROnPlateau", "TerminateOnNaN"]
