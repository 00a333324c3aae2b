"""Safetensors files, read and written without pickle: raw little-endian arrays after a JSON
header. The writer is deterministic (metadata keys sorted, tensors in name order) and atomic
(:mod:`rnnkit._atomic`); the reader refuses anything that is not such a file with
:class:`~rnnkit.FileFormatError` naming the path and its first bytes. Weight files, model files
and fit checkpoints are all written with these two functions.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Mapping

import numpy as np
from safetensors import SafetensorError, safe_open

from rnnkit._atomic import atomic_write_bytes
from rnnkit._errors import FileFormatError
from rnnkit._files import check_regular, read_head

_ST_DTYPES = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
              "int16": "I16", "int8": "I8", "uint64": "U64", "uint32": "U32", "uint16": "U16",
              "uint8": "U8", "bool": "BOOL"}


def safetensors_bytes(tensors: Mapping[str, np.ndarray], metadata: Mapping[str, str]) -> bytes:
    """The safetensors serialisation of ``tensors`` with ``metadata``, byte-for-byte the same for
    the same arrays: metadata keys sorted, tensors in name order (the ``safetensors`` package
    writes its metadata map in hash order, so two saves of one model differed)."""
    header: dict[str, object] = {}
    if metadata:
        header["__metadata__"] = {k: str(metadata[k]) for k in sorted(metadata)}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        a = np.ascontiguousarray(arr).reshape(arr.shape)   # (ascontiguousarray makes a 0-d array 1-d)
        if a.dtype.name not in _ST_DTYPES:
            raise TypeError(f"cannot write {name!r}: dtype {a.dtype} has no safetensors code")
        data = a.astype(a.dtype.newbyteorder("<"), copy=False).tobytes()
        header[name] = {"dtype": _ST_DTYPES[a.dtype.name], "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    return b"".join([struct.pack("<Q", len(head)), head, *blobs])


def write_safetensors(path: str | os.PathLike[str], tensors: Mapping[str, np.ndarray],
                      metadata: Mapping[str, str]) -> None:
    """Serialise ``tensors`` with ``metadata`` (deterministically) and write the file atomically."""
    atomic_write_bytes(path, safetensors_bytes(tensors, metadata))


def read_safetensors(path: str | os.PathLike[str]) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """``(tensors, metadata)`` of a safetensors file; FileFormatError (naming the path and what
    its first bytes are) when it is not one. A missing file raises FileNotFoundError."""
    p = check_regular(path, "a safetensors file")
    try:
        with safe_open(p, framework="numpy") as f:
            meta = dict(f.metadata() or {})
            tensors = {k: np.array(f.get_tensor(k)) for k in f.keys()}  # noqa: SIM118
    except (SafetensorError, ValueError, TypeError) as e:
        size = os.path.getsize(p)
        head = read_head(p, 16, "a safetensors file")
        raise FileFormatError(
            f"{p}: not a safetensors file that numpy can read ({e}); found {size} bytes "
            f"starting {head!r}"
        ) from None
    return tensors, meta
