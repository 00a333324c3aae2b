"""rnnkit: recurrent neural networks on NumPy with explicit BPTT.

The public surface; every name here is re-exported from a private module.
"""

from rnnkit import (
    constraints,  # MaxNorm, NonNeg, UnitNorm, MinMaxNorm (Keras' definitions)
    data,  # batches from anywhere: rnnkit.data.windows / bucket_by_length / Dataset
    datasets,  # bundled public-domain series: rnnkit.datasets.sunspots() / co2()
    distributed,  # data-parallel fit over MPI: distributed=rnnkit.distributed.MPI() (rnnkit[mpi])
    io,
    kernels,  # fast paths: rnnkit.kernels.use("reference") / RNNKIT_KERNELS=reference
    layers,
    losses,
    metrics,
    models,
    optimizers,
    regularizers,  # L1, L2, L1L2 (Keras' definitions)
    rnn,  # the tch-rs nn::rnn face: rnnkit.rnn.lstm / gru
    serve,  # HTTP serving: rnnkit.serve.app(model) / rnnkit serve MODEL (rnnkit[serve])
    timeseries,  # CSV reading, windows, scaler, baselines for forecasting
)
from rnnkit._activations import Activation, HardSigmoid, Linear, ReLU, Sigmoid, Softmax, Tanh
from rnnkit._ctx import Ctx
from rnnkit._errors import (
    Error,
    FileFormatError,
    ForwardPassNotRunError,
    InvalidInputError,
    InvalidParameterError,
    ModelBusyError,
    NonFiniteError,
    NotBuiltError,
    UnknownWeightError,
    WeightShapeError,
)
from rnnkit._layer import Layer, WeightEntry
from rnnkit._mask import Mask
from rnnkit._penalties import attach as attach_regularization
from rnnkit._random import set_global_seed
from rnnkit._shape import Shape
from rnnkit.io import (
    MissingDependencyError,
    UnsupportedFeatureError,
    load_keras,
    load_keras_weights,
    load_layer_weights,
    load_model,
    load_torch_rnn,
    load_torch_safetensors,
    load_weights,
    save_keras,
    save_keras_weights,
    save_layer_weights,
    save_model,
    save_onnx,
    save_torch_safetensors,
    save_weights,
)
from rnnkit.layers import (  # the non-recurrent layers; ActivationLayer: Activation is the enum
    ActivationLayer,
    Add,
    Average,
    Bidirectional,
    Concatenate,
    Dense,
    Dropout,
    Embedding,
    Masking,
    Multiply,
    RepeatVector,
    Reverse,
)
from rnnkit.losses import (
    BinaryCrossEntropy,
    CategoricalCrossEntropy,
    Loss,
    MeanAbsoluteError,
    MeanSquaredError,
    SparseCategoricalCrossEntropy,
)
from rnnkit.models import (
    CSVLogger,
    EarlyStopping,
    GraphBuilder,
    GraphModel,
    History,
    LambdaCallback,
    LearningRateScheduler,
    ModelCheckpoint,
    ProgbarLogger,
    ReduceLROnPlateau,
    Sequential,
    SequentialBuilder,
    TerminateOnNaN,
    model_from_config,
)
from rnnkit.optimizers import SGD, Adam, AdamW, Optimizer, RMSprop
from rnnkit.recurrent import (
    GRU,
    LSTM,
    Cell,
    GRUCell,
    GRUResetAfterCell,
    GRUState,
    LSTMCell,
    LSTMState,
    Param,
    RecurrentLayer,
    SimpleRNN,
    SimpleRNNCell,
    SimpleRNNState,
    StepBack,
    register_cell,
)

__version__ = "0.1.0"

__all__ = [
    "Activation", "HardSigmoid", "Linear", "ReLU", "Sigmoid", "Softmax", "Tanh",
    "Ctx",
    "Error", "ForwardPassNotRunError", "InvalidInputError", "InvalidParameterError", "ModelBusyError",
    "NonFiniteError", "NotBuiltError", "UnknownWeightError", "WeightShapeError",
    "Layer", "WeightEntry", "Mask",
    "set_global_seed",
    "Shape",
    "GRU", "LSTM", "GRUState", "LSTMState", "RecurrentLayer", "SimpleRNN", "SimpleRNNState",
    "Cell", "Param", "StepBack", "GRUCell", "GRUResetAfterCell", "LSTMCell", "SimpleRNNCell",
    "register_cell",
    "rnn", "kernels",
    "FileFormatError",
    "optimizers", "SGD", "Adam", "AdamW", "Optimizer", "RMSprop",
    "metrics",
    "io", "save_weights", "load_weights", "save_layer_weights", "load_layer_weights", "save_model",
    "load_model",
    "load_keras", "load_keras_weights", "load_torch_rnn", "load_torch_safetensors",
    "save_torch_safetensors", "save_onnx", "save_keras", "save_keras_weights", "MissingDependencyError",
    "UnsupportedFeatureError",
    "losses", "Loss", "MeanSquaredError", "MeanAbsoluteError", "BinaryCrossEntropy",
    "CategoricalCrossEntropy", "SparseCategoricalCrossEntropy",
    "layers", "ActivationLayer", "Concatenate", "Dense", "Dropout", "Embedding", "RepeatVector", "Reverse",
    "Add", "Average", "Bidirectional", "Masking", "Multiply",
    "models", "EarlyStopping", "GraphBuilder", "GraphModel", "History", "LearningRateScheduler",
    "ModelCheckpoint", "Sequential", "SequentialBuilder", "model_from_config",
    "CSVLogger", "LambdaCallback", "ProgbarLogger", "ReduceLROnPlateau", "TerminateOnNaN",
    "datasets", "timeseries", "distributed", "regularizers", "constraints", "attach_regularization", "data",
    "serve",
]
