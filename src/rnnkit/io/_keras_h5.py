"""Reading a Keras 3 weights store (``model.weights.h5`` inside a ``.keras`` archive, or a
``.weights.h5`` file written by ``model.save_weights``) with h5py, imported lazily.

The layout, as Keras 3.15.1 writes it (measured)::

    layers/<group>/vars                  attrs {"name": <the Keras layer name>}
    layers/<group>/vars/0, 1, ...        Dense (kernel, bias), Embedding (embeddings)
    layers/<group>/cell/vars/0, 1, 2     SimpleRNN / LSTM / GRU (kernel, recurrent_kernel, bias)
    layers/<group>/forward_layer/cell/vars/0..2   Bidirectional
    layers/<group>/backward_layer/cell/vars/0..2
    optimizer/...  vars                  (ignored)

``<group>`` is the snake-case class name (``lstm``, ``simple_rnn``, ``dense``), suffixed
``_1``, ``_2`` ... for the second, third ... layer of that class, in the model's layer order
(a Sequential's layers exclude its InputLayer; a functional model's include them).
"""

from __future__ import annotations

import io
import os
import re
from typing import Any

import numpy as np

from rnnkit._errors import FileFormatError
from rnnkit.io._interop_errors import MissingDependencyError


def import_h5py() -> Any:
    """The h5py module, or MissingDependencyError saying how to install it."""
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError(
            "reading Keras files needs h5py, which is not installed; install it with "
            "`pip install rnnkit[interop]` (or `pip install h5py`)"
        ) from None
    return h5py


def snake_case(class_name: str) -> str:
    """Keras' ``naming.to_snake_case``: ``"SimpleRNN"`` -> ``"simple_rnn"``."""
    name = re.sub(r"\W+", "", class_name)
    name = re.sub("(.)([A-Z][a-z]+)", r"\1_\2", name)
    return re.sub("([a-z])([A-Z])", r"\1_\2", name).lower()


def unique_groups(class_names: list[str]) -> list[str]:
    """Keras' per-class group names for layers of these classes, in order."""
    used: dict[str, int] = {}
    out = []
    for c in class_names:
        base = snake_case(c)
        if base in used:
            used[base] += 1
            out.append(f"{base}_{used[base]}")
        else:
            used[base] = 0
            out.append(base)
    return out


class WeightStore:
    """Every dataset under ``layers/`` of a Keras weights file, read into memory.

    ``arrays[path]`` is the array at ``path`` (``"layers/lstm/cell/vars/0"``); ``by_name`` maps
    a Keras layer name to its group (``"layers/lstm_1"``) from the ``vars`` name attributes.
    """

    def __init__(self, arrays: dict[str, np.ndarray], by_name: dict[str, str], source: str) -> None:
        self.arrays = arrays
        self.by_name = by_name
        self.source = source

    @classmethod
    def read(cls, data: bytes | str, source: str) -> WeightStore:
        h5py = import_h5py()
        arrays: dict[str, np.ndarray] = {}
        by_name: dict[str, str] = {}
        handle: Any = io.BytesIO(data) if isinstance(data, bytes) else data
        size = len(data) if isinstance(data, bytes) else os.path.getsize(data)
        try:
            f = h5py.File(handle, "r")
        except (OSError, ValueError) as e:
            raise FileFormatError(f"{source}: not an HDF5 Keras weights file ({e})") from None
        left = [size]  # the bytes the datasets may still claim: their data lies in the file
        with f:
            if "layers" not in f:
                raise FileFormatError(
                    f"{source}: an HDF5 file without a 'layers' group is not a Keras 3 weights file "
                    f"(top-level keys {sorted(f.keys())}); a Keras 2 '.h5' model must be re-saved "
                    f"with Keras 3 as '.keras'"
                )

            def visit(name: str, obj: Any) -> None:
                full = "layers/" + name
                if isinstance(obj, h5py.Dataset):
                    if obj.dtype.kind not in "biuf":
                        raise FileFormatError(f"{source}: dataset {full!r} holds {obj.dtype}, not numbers")
                    nbytes = int(np.prod(obj.shape, dtype=object)) * obj.dtype.itemsize
                    if nbytes > left[0]:
                        raise FileFormatError(
                            f"{source}: dataset {full!r} declares shape {obj.shape} ({nbytes} bytes) but "
                            f"the file has {size} bytes, {left[0]} not claimed by earlier datasets; "
                            f"refused before reading")
                    left[0] -= nbytes
                    arrays[full] = np.array(obj[()])
                elif name.count("/") == 1 and name.endswith("/vars"):
                    lname = obj.attrs.get("name")
                    if isinstance(lname, bytes):
                        lname = lname.decode()
                    if isinstance(lname, str):
                        by_name[lname] = full[: -len("/vars")]

            try:
                f["layers"].visititems(visit)
            except FileFormatError:
                raise
            except (OSError, KeyError, ValueError, RuntimeError, TypeError) as e:
                raise FileFormatError(f"{source}: a damaged HDF5 weights file ({e})") from None
        return cls(arrays, by_name, source)

    def vars_at(self, prefix: str) -> list[np.ndarray] | None:
        """The arrays ``prefix/0``, ``prefix/1``, ... in order; None when ``prefix`` holds none
        and no such group exists."""
        keys = [k for k in self.arrays if k.startswith(prefix + "/")]
        if not keys:
            return None
        idx = sorted(int(k[len(prefix) + 1:]) for k in keys if k[len(prefix) + 1:].isdigit())
        if idx != list(range(len(keys))):
            raise FileFormatError(f"{self.source}: the weights under {prefix!r} are not numbered 0..n-1: "
                                  f"{sorted(keys)}")
        return [self.arrays[f"{prefix}/{i}"] for i in idx]

    def groups_with_weights(self) -> set[str]:
        """Every top-level layer group (``"layers/lstm"``) holding at least one array."""
        return {"/".join(k.split("/")[:2]) for k in self.arrays}
