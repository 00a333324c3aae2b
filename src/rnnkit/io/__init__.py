"""Files: safetensors weights and model files (no pickle, atomic writes), and the weight
importers/exporters of one recurrent layer for PyTorch and Keras."""

from rnnkit._atomic import atomic_write_bytes
from rnnkit._files import UnreadableFileError
from rnnkit._limits import LIMITS, Limits, set_limits
from rnnkit.io._deepar import DeepAR
from rnnkit.io._forecaster import load_forecaster, read_forecast_spec, save_forecaster
from rnnkit.io._interop import from_keras_weights, from_torch_state, to_keras_weights, to_torch_state
from rnnkit.io._interop_errors import MissingDependencyError, UnsupportedFeatureError
from rnnkit.io._keras_export import save_keras, save_keras_weights
from rnnkit.io._keras_file import load_keras, load_keras_weights
from rnnkit.io._model import load_model, load_weights, save_model
from rnnkit.io._onnx import save_onnx
from rnnkit.io._torch_file import load_torch_rnn, load_torch_safetensors, save_torch_safetensors
from rnnkit.io._weights import (
    load_layer_weights,
    read_safetensors,
    save_layer_weights,
    save_weights,
)
from rnnkit.models import _files as _model_files

_model_files.install(save_model=save_model, save_weights=save_weights, load_weights=load_weights)

__all__ = [
    "atomic_write_bytes", "from_keras_weights", "from_torch_state", "load_layer_weights", "load_model",
    "load_weights", "read_safetensors", "save_layer_weights", "save_model", "save_weights",
    "to_keras_weights", "to_torch_state",
    "MissingDependencyError", "UnsupportedFeatureError", "load_keras", "load_keras_weights",
    "load_torch_rnn", "load_torch_safetensors", "save_torch_safetensors", "save_onnx",
    "save_keras", "save_keras_weights",
    "LIMITS", "Limits", "set_limits", "UnreadableFileError",
    "load_forecaster", "read_forecast_spec", "save_forecaster", "DeepAR",
]
