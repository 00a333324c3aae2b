"""rnnkit: recurrent neural networks on NumPy with explicit BPTT.

The public surface; every name here is re-exported from a private module.

Layers, bottom to top (a module imports only from its own layer or from lower ones, and the
modules import one another in no cycle, counting imports inside functions and under
``TYPE_CHECKING``; ``tests/test_layering.py`` checks both):

    0  base      _errors _kind _version _config _arrays _random _shape _mask _budget
                 _files _atomic _limits _safetensors _graph_calls _consistency _numbers
    1  core      _activations _initializers _ctx _tape _layer _layouts _penalties kernels ops regularizers
                 constraints losses optimizers metrics activations initializers data timeseries
                 datasets _validate _weight_decl
    2  layers    recurrent layers rnn
    3  models    models callbacks quant
    4  outside   io distributed testing serve
    5  surface   rnnkit
    6  apps      cli __main__

``base`` holds the errors and the small shared types; ``core`` the passes' state (``Ctx``), the
``Layer`` base, activations, initialisers, compiled kernels, losses, optimizers, metrics and
data sources; ``layers`` the recurrent and other layers; ``models`` Sequential and graph models
and their training; ``outside`` what talks to files, other libraries and other processes (the model server
included); ``surface`` this module; ``apps`` the command line, a user of the surface.

One way per task. The canonical spellings are Keras' where Keras has one (``Sequential([...],
input_shape=...)``, ``fit(x, y, epochs, batch_size=...)``, ``seed=`` and the other constructor
keywords); the few other spellings kept for older programs (``SequentialBuilder``,
``fit_with_batches``, ``with_random_state`` ...) are thin aliases of them, listed once, with
their canonical spellings, in :data:`rnnkit.models._aliases.ALIASES` (the user guide's
``aliases.md`` shows that table).

For a custom cell or layer: :mod:`rnnkit.activations`, :mod:`rnnkit.initializers` and the layer
checker :mod:`rnnkit.testing` (gradients, fast vs reference, save/load round trip).
"""

from rnnkit import (
    activations,  # Tanh(), Softmax(axis), activations.get("relu"): what activation= takes
    callbacks,  # keras.callbacks' names: rnnkit.callbacks.EarlyStopping, ModelCheckpoint, ...
    constraints,  # MaxNorm, NonNeg, UnitNorm, MinMaxNorm (Keras' definitions)
    data,  # batches from anywhere: rnnkit.data.windows / bucket_by_length / Dataset
    datasets,  # bundled public-domain series: rnnkit.datasets.sunspots() / co2()
    distributed,  # data-parallel fit over MPI: distributed=rnnkit.distributed.MPI() (rnnkit[mpi])
    initializers,  # glorot_uniform, orthogonal, ...: what a custom cell's Param draws with
    io,
    kernels,  # fast paths: rnnkit.kernels.use("reference") / RNNKIT_KERNELS=reference
    layers,
    losses,
    metrics,
    models,
    ops,  # keras.ops' names with gradients: rnnkit.ops.matmul, softmax, ... (the tape records them)
    optimizers,
    quant,  # int8 inference: rnnkit.quantize(model) (its layers: rnnkit.quant)
    regularizers,  # L1, L2, L1L2 (Keras' definitions)
    rnn,  # whole networks in PyTorch layout: rnnkit.rnn.lstm / gru / rnn
    serve,  # HTTP serving: rnnkit.serve.app(model) / rnnkit serve MODEL (rnnkit[serve])
    testing,  # the layer checker: rnnkit.testing.check_layer(make_layer, make_input)
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
    MemoryBudgetError,
    MethodNotImplementedError,
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
from rnnkit._tape import GradientTape, TapeError
from rnnkit._version import __version__ as __version__
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
    AdditiveAttention,
    Attention,
    Average,
    AveragePooling1D,
    BatchNormalization,
    Bidirectional,
    Concatenate,
    Conv1D,
    ConvLSTM1D,
    ConvLSTM2D,
    Cropping1D,
    Dense,
    Dot,
    Dropout,
    Embedding,
    Flatten,
    GaussianNoise,
    GlobalAveragePooling1D,
    GlobalMaxPooling1D,
    GroupNormalization,
    Lambda,
    LayerNormalization,
    Masking,
    Maximum,
    MaxPooling1D,
    Minimum,
    MultiHeadAttention,
    Multiply,
    Permute,
    RepeatVector,
    Reshape,
    Reverse,
    SpatialDropout1D,
    Subtract,
    TimeDistributed,
    UpSampling1D,
    ZeroPadding1D,
)
from rnnkit.losses import (
    BinaryCrossEntropy,
    BinaryCrossentropy,
    CategoricalCrossEntropy,
    CategoricalCrossentropy,
    Loss,
    MeanAbsoluteError,
    MeanSquaredError,
    SparseCategoricalCrossEntropy,
    SparseCategoricalCrossentropy,
)
from rnnkit.models import (
    CSVLogger,
    EarlyStopping,
    GraphBuilder,
    GraphModel,
    History,
    Input,
    InputLayer,
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
from rnnkit.models import FunctionalModel as Model  # Keras' functional API: rk.Model(inputs, outputs)
from rnnkit.models._habits import FullBatchWarning  # fit without batch_size on many samples
from rnnkit.optimizers import SGD, Adam, AdamW, Optimizer, RMSprop
from rnnkit.quant import quantize
from rnnkit.recurrent import (
    GRU,
    LSTM,
    MLSTM,
    RNN,
    SLSTM,
    Cell,
    GRUCell,
    GRUResetAfterCell,
    GRUState,
    LSTMCell,
    LSTMState,
    MinGRU,
    MinGRUCell,
    MinLSTM,
    MinLSTMCell,
    MLSTMCell,
    Param,
    RecurrentLayer,
    SequenceBack,
    SimpleRNN,
    SimpleRNNCell,
    SimpleRNNState,
    SLSTMCell,
    StackedRNNCells,
    StepBack,
    register_cell,
)

__all__ = [
    "Activation", "HardSigmoid", "Linear", "ReLU", "Sigmoid", "Softmax", "Tanh",
    "Ctx",
    "Error", "ForwardPassNotRunError", "InvalidInputError", "InvalidParameterError", "MemoryBudgetError",
    "MethodNotImplementedError", "ModelBusyError",
    "NonFiniteError", "NotBuiltError", "UnknownWeightError", "WeightShapeError",
    "Layer", "WeightEntry", "Mask",
    "set_global_seed",
    "Shape",
    "GRU", "LSTM", "GRUState", "LSTMState", "RecurrentLayer", "SimpleRNN", "SimpleRNNState",
    "Cell", "Param", "SequenceBack", "StepBack", "GRUCell", "GRUResetAfterCell", "LSTMCell", "SimpleRNNCell",
    "MinGRU", "MinLSTM", "MinGRUCell", "MinLSTMCell",
    "register_cell",
    "RNN", "GroupNormalization",  # issue 39's block
    "StackedRNNCells",
    "rnn", "kernels",
    "FileFormatError",
    "optimizers", "SGD", "Adam", "AdamW", "Optimizer", "RMSprop",
    "metrics",
    "io", "save_weights", "load_weights", "save_layer_weights", "load_layer_weights", "save_model",
    "load_model",
    "load_keras", "load_keras_weights", "load_torch_rnn", "load_torch_safetensors",
    "save_torch_safetensors", "save_onnx", "save_keras", "save_keras_weights", "MissingDependencyError",
    "UnsupportedFeatureError",
    "losses", "Loss", "MeanSquaredError", "MeanAbsoluteError", "BinaryCrossentropy",
    "CategoricalCrossentropy", "SparseCategoricalCrossentropy",
    "BinaryCrossEntropy", "CategoricalCrossEntropy", "SparseCategoricalCrossEntropy",
    "layers", "ActivationLayer", "Concatenate", "Dense", "Dropout", "Embedding", "RepeatVector", "Reverse",
    "Add", "Average", "Bidirectional", "Masking", "Multiply", "LayerNormalization",
    "Conv1D", "MaxPooling1D", "AveragePooling1D", "GlobalAveragePooling1D", "GlobalMaxPooling1D",
    "ZeroPadding1D", "Cropping1D", "UpSampling1D", "BatchNormalization",
    "AdditiveAttention", "Attention", "MultiHeadAttention",
    "models", "EarlyStopping", "GraphBuilder", "GraphModel", "History", "LearningRateScheduler",
    "ModelCheckpoint", "Sequential", "SequentialBuilder", "model_from_config",
    "CSVLogger", "LambdaCallback", "ProgbarLogger", "ReduceLROnPlateau", "TerminateOnNaN",
    "datasets", "timeseries", "distributed", "regularizers", "constraints", "attach_regularization", "data",
    "activations", "initializers", "testing", "serve",
    "Input", "InputLayer", "Model",
]
__all__ += ["callbacks", "FullBatchWarning", "quant", "quantize"]
__all__ += ["ops", "GradientTape", "TapeError"]
__all__ += ["Dot", "Flatten", "GaussianNoise", "Lambda", "Maximum", "Minimum", "Permute", "Reshape",
            "SpatialDropout1D", "Subtract", "TimeDistributed"]
__all__ += ["SLSTM", "MLSTM", "SLSTMCell", "MLSTMCell"]
__all__ += ["ConvLSTM1D", "ConvLSTM2D"]
