"""``rnnkit convert SRC DST``: models in and out of rnnkit. SRC is read by its content, never
its name; DST's format is chosen by its name.

In (SRC, by content)::

    a Keras 3 archive          (rnnkit.load_keras), whatever it is called
    Keras HDF5 weights         installed into the architecture of --like MODEL (an rnnkit model
                               file) with rnnkit.load_keras_weights
    safetensors                an rnnkit model file (its metadata says so: ``m.safetensors``,
                               ``sum3.rnnkit``), or else a PyTorch LSTM/GRU/RNN state dict
                               (rnnkit.load_torch_rnn; --batch-first, --prefix, --nonlinearity
                               say what the weights do not)

Out (DST, by name)::

    *.onnx           an ONNX graph (rnnkit.save_onnx; --opset, --lengths)
    *.keras          a Keras 3 archive (rnnkit.save_keras)
    *.weights.h5     Keras weights (rnnkit.save_keras_weights)
    *.safetensors    from a foreign file: an rnnkit model file; from an rnnkit model file: a
                     PyTorch state dict (the model must be one RNNNet or recurrent layer)
    *.rnnkit         an rnnkit model file (an rnnkit SRC's forecast settings kept)

``--quantize`` writes the int8 form of the model (:func:`rnnkit.quantize`) as an rnnkit model
file (DST ``*.rnnkit`` or ``*.safetensors``), keeping an rnnkit SRC's forecast settings, so
that ``rnnkit predict`` takes it as it takes the float32 file.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

import rnnkit as rk
from rnnkit._safetensors import read_safetensors
from rnnkit.cli._common import CliError
from rnnkit.io._model import MODEL_FORMAT
from rnnkit.io._sniff import describe, sniff
from rnnkit.models import Sequential
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNNet
from rnnkit.timeseries import SPEC_KEY

_WHAT = {"keras": "a Keras archive", "safetensors": "a safetensors file", "onnx": "an ONNX graph",
         "torch": "a torch.save file", "pickle": "a pickle", "zip": "a zip archive",
         "unknown": "of no format rnnkit reads"}

IN_FORMATS = "Keras .keras archives, Keras HDF5 weights (with --like), safetensors files"
OUT_FORMATS = ".onnx, .keras, .weights.h5, .safetensors, .rnnkit"


def add_parser(sub: Any) -> None:
    c = sub.add_parser("convert", help="convert a model between rnnkit, Keras, PyTorch and ONNX files "
                                       "(formats by suffix)")
    c.add_argument("src", metavar="SRC", help=f"the model to read ({IN_FORMATS})")
    c.add_argument("dst", metavar="DST", help=f"the file to write ({OUT_FORMATS})")
    c.add_argument("--like", default=None, metavar="MODEL",
                   help="an rnnkit model file whose architecture takes the weights of a .weights.h5 SRC")
    c.add_argument("--batch-first", action="store_true",
                   help="a PyTorch SRC module had batch_first=True (not stored in its weights)")
    c.add_argument("--prefix", default="", help="a PyTorch SRC module's name in its state dict, e.g. 'lstm.'")
    c.add_argument("--nonlinearity", choices=("tanh", "relu"), default="tanh",
                   help="a PyTorch nn.RNN SRC's nonlinearity (default tanh)")
    c.add_argument("--opset", type=int, default=None, help="the ONNX opset of an .onnx DST (default 17)")
    c.add_argument("--lengths", action="store_true",
                   help="an .onnx DST takes an int64 'lengths' input (PyTorch's packed sequences)")
    c.add_argument("--quantize", action="store_true",
                   help="write the int8 model (rnnkit.quantize) as an rnnkit model file (.rnnkit or "
                        ".safetensors DST)")


def _kind(path: str) -> str:
    low = path.lower()
    for suffix in (".weights.h5", ".keras", ".safetensors", ".onnx", ".rnnkit"):
        if low.endswith(suffix):
            return suffix
    return Path(path).suffix or "(no suffix)"


def _is_rnnkit_model(path: str) -> bool:
    return read_safetensors(path)[1].get("format") == MODEL_FORMAT


def _read(args: argparse.Namespace) -> tuple[Any, bool]:
    """(the model, whether SRC was an rnnkit model file), SRC read by its content."""
    src = args.src
    if not Path(src).exists():
        raise CliError(f"{src}: no such file")
    kind = sniff(src)
    if args.like is not None and kind != "hdf5":
        raise CliError(f"--like applies to a Keras weights (HDF5) SRC only; {src} is {_WHAT.get(kind, kind)}")
    if kind == "keras":
        return rk.load_keras(src), False
    if kind == "hdf5":
        if args.like is None:
            raise CliError(f"{src}: a Keras weights file holds no architecture; pass --like MODEL (an "
                           f"rnnkit model file of the same architecture)")
        model = rk.load_model(args.like)
        rk.load_keras_weights(model, src)
        return model, False
    if kind == "safetensors":
        if _is_rnnkit_model(src):
            return rk.load_model(src), True
        net = rk.load_torch_rnn(src, prefix=args.prefix, batch_first=args.batch_first,
                                nonlinearity=args.nonlinearity)
        return net, False
    raise describe(src, kind, f"a model convert reads ({IN_FORMATS})")


def _single(model: Any, dst: str) -> Any:
    """The one RNNNet / recurrent layer a PyTorch state dict can hold."""
    if isinstance(model, (RNNNet, RecurrentLayer)):
        return model
    layers = list(getattr(model, "layers", []))
    if len(layers) == 1 and isinstance(layers[0], (RNNNet, RecurrentLayer)):
        return layers[0]
    raise CliError(f"{dst}: a PyTorch state dict holds one torch.nn.LSTM/GRU/RNN; this model has "
                   f"{len(layers)} layers ({', '.join(type(lay).__name__ for lay in layers)})")


def _as_model(model: Any) -> Any:
    """A model around a bare RNNNet (what load_torch_rnn gives), for the model writers."""
    if isinstance(model, RNNNet):
        return Sequential([model], input_shape=(None, None, model.in_dim), name="torch_rnn")
    return model


def convert_command(args: argparse.Namespace) -> int:
    dst, kind = args.dst, _kind(args.dst)
    if kind not in (".onnx", ".keras", ".weights.h5", ".safetensors", ".rnnkit"):
        raise CliError(f"{dst}: unknown output format {kind!r}; convert writes {OUT_FORMATS}")
    if Path(dst).resolve() == Path(args.src).resolve():
        raise CliError(f"{dst}: DST is SRC; write the conversion to another file")
    if (args.opset is not None or args.lengths) and kind != ".onnx":
        raise CliError("--opset and --lengths apply to an .onnx DST only")
    if args.quantize and kind not in (".rnnkit", ".safetensors"):
        raise CliError(f"{dst}: --quantize writes an rnnkit model file (.rnnkit or .safetensors), "
                       f"not {kind}")
    model, from_rnnkit = _read(args)
    # an rnnkit SRC's forecast settings (its preprocessing) go into every rnnkit model file written
    spec = read_safetensors(args.src)[1].get(SPEC_KEY) if from_rnnkit else None
    keep = None if spec is None else {SPEC_KEY: spec}
    if args.quantize:
        rk.save_model(rk.quantize(_as_model(model)), dst, metadata=keep)
        print(f"wrote {dst} (an int8 rnnkit model file)")
        return 0
    if kind == ".onnx":
        target = model if isinstance(model, RNNNet) else _as_model(model)
        rk.save_onnx(target, dst, opset=args.opset, lengths=args.lengths)
        what = "an ONNX graph"
    elif kind == ".keras":
        rk.save_keras(_as_model(model), dst)
        what = "a Keras 3 archive"
    elif kind == ".weights.h5":
        rk.save_keras_weights(_as_model(model), dst)
        what = "Keras weights"
    elif from_rnnkit and kind == ".safetensors":
        rk.save_torch_safetensors(_single(model, dst), dst)
        what = "a PyTorch state dict"
    else:
        rk.save_model(_as_model(model), dst, metadata=keep)
        what = "an rnnkit model file"
    print(f"wrote {dst} ({what})")
    return 0
