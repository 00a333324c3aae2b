"""PyTorch recurrent networks through safetensors files — never through pickles.

``torch.save`` writes a pickle (inside a zip archive since torch 1.6); unpickling runs code, so
rnnkit never loads one. The safe route is safetensors: in PyTorch,
``safetensors.torch.save_file(module.state_dict(), "lstm.safetensors")``; here,
:func:`load_torch_rnn` rebuilds an :class:`~rnnkit.rnn.RNNNet` from it. The reverse,
:func:`save_torch_safetensors`, writes a file that PyTorch loads with
``module.load_state_dict(safetensors.torch.load_file(path))``.

Names and layouts are PyTorch's (``weight_ih_l{k}[_reverse]`` (G*H, in_k), ``weight_hh_l{k}``
(G*H, H), ``bias_ih_l{k}`` / ``bias_hh_l{k}`` (G*H,)); see :mod:`rnnkit.rnn`. Everything the
network needs is inferred from the names and shapes:

- the cell: ``G = weight_hh_l0.shape[0] / H`` with ``H = weight_hh_l0.shape[1]`` (with a
  projection ``weight_hr_l0`` (P, H): ``H = weight_hr_l0.shape[1]``): 4 is an LSTM, 3 a GRU,
  1 a ``torch.nn.RNN`` (its ``nonlinearity`` is not in the weights: pass it);
- ``in_dim`` = ``weight_ih_l0.shape[1]``, ``hidden_dim`` = H;
- ``num_layers`` = the number of ``l{k}`` indices (they must be 0..L-1);
- ``bidirectional`` = whether ``*_reverse`` names exist;
- ``has_biases`` = whether ``bias_ih_l0`` exists.

``batch_first`` is NOT in the weights: pass it as PyTorch's module had it (default False, like
``torch.nn.LSTM``; note ``RNNConfig``'s default is True). LSTMs with ``proj_size > 0``
(``weight_hr_l{k}``) load as an RNNNet with that ``proj_size``. :func:`save_torch_safetensors`
writes the same names back: a file read here and written again is the same state dict. A
file whose every name is missing the expected ones but has
them under a prefix (a module nested as ``self.lstm``) is reported with the candidate
``prefix=`` values.
"""

from __future__ import annotations

import os
import re
import struct
import zipfile
from typing import Any

import numpy as np

from rnnkit._errors import FileFormatError, InvalidInputError
from rnnkit._files import check_regular, read_head
from rnnkit._layer import check_bool, check_float, resolve_dtype
from rnnkit._safetensors import read_safetensors, write_safetensors
from rnnkit.io._interop import to_torch_state
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.io._weights import check_finite_weights
from rnnkit.recurrent import RecurrentLayer
from rnnkit.rnn import RNNConfig, RNNNet

_NAME = re.compile(r"^(weight_ih|weight_hh|bias_ih|bias_hh|weight_hr)_l(\d+)(_reverse)?$")


def _sniff(p: str) -> None:
    """FileFormatError (without unpickling anything) when ``p`` is not a safetensors file."""
    check_regular(p, "a safetensors file")
    size = os.path.getsize(p)
    head = read_head(p, 16, "a safetensors file")
    if size >= 10 and 2 <= struct.unpack("<Q", head[:8])[0] <= size - 8 and head[8:9] == b"{":
        return  # a safetensors header (its length's low bytes can look like a pickle's "\x80\x04")
    advice = ("rnnkit never unpickles files (unpickling can run arbitrary code); in PyTorch, write "
              "the state dict with safetensors.torch.save_file(model.state_dict(), 'model.safetensors')")
    if head.startswith(b"PK\x03\x04"):
        try:
            with zipfile.ZipFile(p) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
            raise FileFormatError(f"{p}: a damaged zip archive, not a safetensors file ({e})") from None
        if any(n.endswith("data.pkl") for n in names):
            raise FileFormatError(f"{p}: a torch.save file (a zip archive holding a pickle, "
                                  f"{[n for n in names if n.endswith('data.pkl')][0]!r}); {advice}")
        raise FileFormatError(f"{p}: a zip archive (holding {names[:5]}), not a safetensors file")
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        raise FileFormatError(f"{p}: a Python pickle (protocol {head[1]}; a legacy torch.save file); "
                              f"{advice}")
    if head.startswith(b"\x89HDF"):
        raise FileFormatError(f"{p}: an HDF5 file (Keras weights? see rnnkit.io.load_keras_weights), "
                              f"not a safetensors file")
    if size < 8 or not 2 <= struct.unpack("<Q", head[:8])[0] <= size - 8 or head[8:9] != b"{":
        raise FileFormatError(f"{p}: not a safetensors file ({size} bytes starting {head!r}); a "
                              f"safetensors file starts with an 8-byte header length and a JSON header")


def load_torch_safetensors(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The tensors of a safetensors file (``safetensors.torch.save_file``) as NumPy arrays.

    A ``torch.save`` file (zip archive with a pickle, or a legacy raw pickle) is recognised by
    its first bytes and refused with FileFormatError saying what it is and how to write
    safetensors instead; nothing is ever unpickled."""
    p = os.fspath(path)
    _sniff(p)
    return read_safetensors(p)[0]


_Found = dict[tuple[str, int, bool], np.ndarray]


def _parse(tensors: dict[str, np.ndarray], prefix: str, where: str) -> _Found:
    found: _Found = {}
    stray = []
    for k, v in tensors.items():
        if not k.startswith(prefix):
            continue
        m = _NAME.match(k[len(prefix):])
        if m is None:
            stray.append(k)
        else:
            found[(m.group(1), int(m.group(2)), m.group(3) is not None)] = v
    if not found:
        cands = sorted({k[: k.index("weight_ih_l0")] for k in tensors if "weight_ih_l0" in k})
        hint = f"; names ending 'weight_ih_l0' appear under prefix= {cands}" if cands else ""
        raise InvalidInputError(f"{where}: no PyTorch RNN parameters under prefix {prefix!r} (expected "
                                f"'{prefix}weight_ih_l0', ...); the file holds {sorted(tensors)[:12]}{hint}")
    if stray and not prefix:
        raise InvalidInputError(f"{where}: names that are not torch.nn.LSTM/GRU parameters: {sorted(stray)}; "
                                f"pass prefix= for a module nested in a larger model")
    return found


def load_torch_rnn(path: str | os.PathLike[str], *, prefix: str = "", batch_first: bool = False,
                   dropout: float = 0.0, dtype: Any = None, nonlinearity: str = "tanh") -> RNNNet:
    """An :class:`~rnnkit.rnn.RNNNet` holding the ``torch.nn.LSTM`` / ``GRU`` weights of a
    safetensors file (see the module doc for what is inferred and what must be passed).

    ``prefix``: the module's name in a larger model's state dict, with its dot (``"lstm."``);
    other names of the file are then ignored. ``dropout``: PyTorch's inter-layer dropout (not
    stored in the weights; used only in training). ``nonlinearity``: a ``torch.nn.RNN``'s
    (``"tanh"`` or ``"relu"``; not stored in the weights). An LSTM with ``proj_size`` is
    recognised by its ``weight_hr`` tensors. ``dtype``: the network's dtype; default the
    file's (float64 stays float64, anything else becomes float32).

    ``net.seq(x)`` then returns PyTorch's ``(output, (h_n, c_n))`` values (as an LSTMState /
    GRUState / SimpleRNNState) for the same input layout."""
    p = os.fspath(path)
    where = f"load_torch_rnn({p})"
    if not isinstance(prefix, str):
        raise TypeError(f"{where}: prefix must be a str such as 'lstm.', got {prefix!r}")
    batch_first = check_bool(batch_first, "batch_first", where)
    rate = check_float(dropout, "dropout", where, lo=0.0, hi=1.0, hi_open=True)
    if dtype is not None:
        resolve_dtype(dtype, where)
    tensors = load_torch_safetensors(p)
    check_finite_weights(tensors, where)
    found = _parse(tensors, prefix, where)
    if ("weight_hh", 0, False) not in found or ("weight_ih", 0, False) not in found:
        raise InvalidInputError(f"{where}: '{prefix}weight_ih_l0' and '{prefix}weight_hh_l0' are required")
    whh, wih = found[("weight_hh", 0, False)], found[("weight_ih", 0, False)]
    whr = found.get(("weight_hr", 0, False))
    width = (whh.shape[1] if whr is None or whr.ndim != 2 else whr.shape[1]) if whh.ndim == 2 else 0  # H
    if whh.ndim != 2 or wih.ndim != 2 or whh.shape[1] < 1 or width < 1 or whh.shape[0] % width:
        raise InvalidInputError(f"{where}: weight_hh_l0 {whh.shape} / weight_ih_l0 {wih.shape} are not "
                                f"(G*H, H or proj_size) / (G*H, in_dim)")
    if whr is not None and (whr.ndim != 2 or whr.shape[0] != whh.shape[1] or whr.shape[1] < 1):
        raise InvalidInputError(f"{where}: weight_hr_l0 {whr.shape} is not (proj_size, H) with proj_size = "
                                f"weight_hh_l0's width {whh.shape[1]}")
    H = int(whh.shape[1]) if whr is None else int(whr.shape[1])
    G = whh.shape[0] // H
    mode = {4: "lstm", 3: "gru", 1: "rnn"}.get(G) if whh.shape[0] % H == 0 else None
    if mode is None or (whr is not None and mode != "lstm"):
        raise UnsupportedFeatureError(prefix + "weight_hh_l0", "mode",
                                      f"{whh.shape[0]} rows of {H}: not an RNN, LSTM or GRU")
    layers = sorted({k for _, k, _ in found})
    if layers != list(range(len(layers))):
        raise InvalidInputError(f"{where}: layer indices {layers} are not 0..{len(layers) - 1}")
    if dtype is None:
        dtype = "float64" if whh.dtype == np.float64 else "float32"
    config = RNNConfig(num_layers=len(layers), bidirectional=any(r for _, _, r in found),
                       has_biases=("bias_ih", 0, False) in found, batch_first=batch_first,
                       dropout=rate, proj_size=0 if whr is None else int(whr.shape[0]),
                       nonlinearity=nonlinearity)
    net = RNNNet(mode, int(wih.shape[1]), H, config, dtype=dtype)  # sizes read off the file's tensors
    state = {f"{kind}_l{k}{'_reverse' if r else ''}": v for (kind, k, r), v in found.items()}
    want = net.state_dict()
    bad = [f"{prefix}{n}: expected {want[n].shape}, got {state[n].shape if n in state else 'missing'}"
           for n in want if n not in state or state[n].shape != want[n].shape]
    bad += [f"{prefix}{n}: unexpected" for n in state if n not in want]
    if bad:
        raise InvalidInputError(f"{where}: the {mode.upper()} inferred ({config.num_layers} layer(s), "
                                f"{'bi' if config.bidirectional else 'uni'}directional, in_dim "
                                f"{wih.shape[1]}, hidden {H}) does not fit: {'; '.join(bad)}")
    net.load_state_dict(check_finite_weights(state, where, dict.fromkeys(state, net.dtype)))
    return net


def save_torch_safetensors(net: RNNNet | RecurrentLayer, path: str | os.PathLike[str], *,
                           prefix: str = "") -> None:
    """Write ``net``'s parameters under PyTorch's names (``prefix`` prepended) to a safetensors
    file, atomically. ``torch.nn.LSTM/GRU(...).load_state_dict(safetensors.torch.load_file(path))``
    then computes what ``net`` computes (build the torch module with the same in_dim, hidden,
    num_layers, bidirectional, bias, batch_first). A single SimpleRNN / LSTM / GRU layer is
    written as layer 0 of ``torch.nn.RNN/LSTM/GRU`` (see :func:`~rnnkit.io.to_torch_state`); a
    ``go_backwards`` layer is refused (a one-direction torch module reads forward: it would
    compute another function with these weights)."""
    if isinstance(net, RecurrentLayer) and net.go_backwards:
        raise UnsupportedFeatureError(net.name, "go_backwards",
                                      "a one-direction torch.nn module reads the sequence forward, so it "
                                      "would compute something else with these weights; feed it "
                                      "torch.flip(x, [1]) yourself and take the weights with "
                                      "rnnkit.io.to_torch_state(layer)")
    state = net.state_dict() if isinstance(net, RNNNet) else to_torch_state(net)
    write_safetensors(path, {prefix + k: v for k, v in state.items()}, {"format": "pt"})
