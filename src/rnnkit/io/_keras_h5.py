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

import contextlib
import io
import os
import re
from typing import Any, BinaryIO

import numpy as np

from rnnkit._errors import FileFormatError
from rnnkit._files import open_regular
from rnnkit.io._h5_checks import check_dataset, check_links
from rnnkit.io._interop_errors import MissingDependencyError


def import_h5py(action: str = "reading") -> Any:
    """The h5py module, or MissingDependencyError saying that ``action`` (``"reading"``,
    ``"writing"``) Keras files needs it and how to install it."""
    try:
        import h5py
    except ImportError:
        raise MissingDependencyError(
            f"{action} Keras files needs h5py, which is not installed; install it with "
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


def _read_layers(f: Any, h5py: Any, source: str, size: int) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(arrays, by_name)`` of an open weights file (see :class:`WeightStore`)."""
    # the link itself, not what it names: `"layers" in f` would follow an external link
    if not f.id.links.exists(b"layers"):
        raise FileFormatError(
            f"{source}: an HDF5 file without a 'layers' group is not a Keras 3 weights file "
            f"(top-level keys {sorted(f.keys())}); a Keras 2 '.h5' model must be re-saved "
            f"with Keras 3 as '.keras'")
    if f.id.links.get_info(b"layers").type != h5py.h5l.TYPE_HARD:
        raise FileFormatError(f"{source}: 'layers' is a soft or external link, not the file's own "
                              f"group; refused before reading")
    group = f["layers"]
    if not isinstance(group, h5py.Group):
        raise FileFormatError(f"{source}: 'layers' is a dataset, not a group")
    check_links(group, h5py, source, "layers/")
    arrays: dict[str, np.ndarray] = {}
    by_name: dict[str, str] = {}
    left = [size]  # the bytes the datasets may still claim: their data lies in the file

    def visit(name: str, obj: Any) -> None:
        full = "layers/" + name
        if isinstance(obj, h5py.Dataset):
            _, stored = check_dataset(obj, h5py, source, full, left[0])
            left[0] -= stored
            arrays[full] = np.array(obj[()])
        elif name.count("/") == 1 and name.endswith("/vars"):
            lname = obj.attrs.get("name")
            if isinstance(lname, bytes):
                lname = lname.decode("utf-8", "replace")
            if isinstance(lname, str):
                by_name[lname] = full[: -len("/vars")]

    group.visititems(visit)
    return arrays, by_name


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
    def read(cls, data: bytes | str | BinaryIO, source: str) -> WeightStore:
        """Every dataset under ``layers/`` of the HDF5 file ``data`` (its bytes, a path to a
        regular file, or an open binary file, read from its start and left open), each checked
        by :func:`~rnnkit.io._h5_checks.check_dataset` before it is read: nothing is read from
        outside the file. FileFormatError names the dataset or link refused."""
        h5py = import_h5py()
        if isinstance(data, (bytes, str)):
            handle: Any = io.BytesIO(data) if isinstance(data, bytes) else open_regular(data, "an HDF5 file")
        else:
            data.seek(0)
            handle = contextlib.nullcontext(data)
        with handle as fh:
            size = len(data) if isinstance(data, bytes) else os.fstat(fh.fileno()).st_size
            try:
                f = h5py.File(fh, "r")
            except (OSError, ValueError) as e:
                raise FileFormatError(f"{source}: not an HDF5 Keras weights file ({e})") from None
            with f:
                try:
                    return cls(*_read_layers(f, h5py, source, size), source)
                except FileFormatError:
                    raise
                except (OSError, KeyError, ValueError, RuntimeError, TypeError, SystemError) as e:
                    # SystemError: h5py's lock wrapper around an error inside a damaged file
                    raise FileFormatError(f"{source}: a damaged HDF5 weights file ({e})") from None

    def vars_at(self, prefix: str) -> list[np.ndarray] | None:
        """The arrays ``prefix/0``, ``prefix/1``, ... in order; None when ``prefix`` holds none
        and no such group exists."""
        keys = [k for k in self.arrays if k.startswith(prefix + "/")]
        if not keys:
            return None
        want = [f"{prefix}/{i}" for i in range(len(keys))]
        if sorted(keys) != sorted(want):
            raise FileFormatError(f"{self.source}: the weights under {prefix!r} are not numbered 0..n-1: "
                                  f"{sorted(keys)[:20]}")
        return [self.arrays[k] for k in want]

    def groups_with_weights(self) -> set[str]:
        """Every top-level layer group (``"layers/lstm"``) holding at least one array."""
        return {"/".join(k.split("/")[:2]) for k in self.arrays}
