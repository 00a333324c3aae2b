"""What a file is, from its first bytes, never from its name: the loaders dispatch on this.

=============  ==========================================================================
kind           how it is recognised
=============  ==========================================================================
safetensors    an 8-byte little-endian header length that fits the file, then ``{``
keras          a zip archive holding ``config.json`` and ``model.weights.h5``
torch          a zip archive holding ``*/data.pkl`` (``torch.save``: a pickle inside)
zip            any other zip archive
hdf5           the HDF5 signature ``\\x89HDF\\r\\n\\x1a\\n`` (a Keras ``.weights.h5`` file)
onnx           a protobuf ``ModelProto``: field 1 (``ir_version``) first, then known fields
pickle         ``\\x80`` and a protocol 2-5 (a legacy ``torch.save`` file)
unknown        anything else (empty files too)
=============  ==========================================================================
"""

from __future__ import annotations

import os
import struct
import zipfile

from rnnkit._errors import FileFormatError
from rnnkit._files import check_regular, open_regular

HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"
#: ModelProto's field numbers (onnx.proto): ir_version, opset_import, producer_name/version,
#: domain, model_version, doc_string, graph, metadata_props, training_info, functions
_ONNX_FIELDS = {1, 2, 3, 4, 5, 6, 7, 8, 14, 20, 25}
_HEAD = 4096


def _varint(buf: bytes, i: int) -> tuple[int, int]:
    """The protobuf varint at ``buf[i:]`` and the index after it; ValueError when cut off."""
    value = shift = 0
    while True:
        if i >= len(buf) or shift > 63:
            raise ValueError("truncated varint")
        b = buf[i]
        value |= (b & 0x7F) << shift
        i += 1
        if not b & 0x80:
            return value, i
        shift += 7


def looks_like_onnx(head: bytes, size: int) -> bool:
    """Whether ``head`` (the first bytes of a ``size``-byte file) starts like an ONNX
    ModelProto: ``ir_version`` (field 1, a small varint) first, then fields of ModelProto with
    lengths that fit the file."""
    if len(head) < 2 or head[0] != 0x08:
        return False
    try:
        version, i = _varint(head, 1)
        if not 1 <= version <= 100:
            return False
        fields = 1
        while i < len(head) and fields < 4:
            tag, i = _varint(head, i)
            number, wire = tag >> 3, tag & 7
            if number not in _ONNX_FIELDS or wire not in (0, 2):
                return False
            value, i = _varint(head, i)
            if wire == 2:
                if value > size - i:
                    return False
                i += value
            fields += 1
    except ValueError:
        return False
    return True


def sniff(path: str | os.PathLike[str]) -> str:
    """The kind of the regular file at ``path`` (see the module doc). A FIFO, device or
    directory is refused before reading (:func:`~rnnkit._files.check_regular`)."""
    p = check_regular(path)
    with open_regular(p) as fh:
        head = fh.read(_HEAD)
        size = os.fstat(fh.fileno()).st_size
    if len(head) >= 10 and head[8:9] == b"{" and 2 <= struct.unpack("<Q", head[:8])[0] <= size - 8:
        return "safetensors"
    if head.startswith(HDF5_SIGNATURE):
        return "hdf5"
    if head.startswith(b"PK\x03\x04") or head.startswith(b"PK\x05\x06"):
        try:
            with zipfile.ZipFile(p) as z:
                names = z.namelist()
        except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
            return "zip"
        if "config.json" in names and "model.weights.h5" in names:
            return "keras"
        if any(n.endswith("data.pkl") for n in names):
            return "torch"
        return "zip"
    if len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5:
        return "pickle"
    if looks_like_onnx(head, size):
        return "onnx"
    return "unknown"


def describe(path: str, kind: str, wanted: str) -> FileFormatError:
    """The error for a file of ``kind`` where ``wanted`` was expected, saying what it is and
    what reads it."""
    never = ("rnnkit never unpickles files (unpickling can run arbitrary code); in PyTorch, write the "
             "state dict with safetensors.torch.save_file(model.state_dict(), 'model.safetensors')")
    what = {
        "hdf5": "a Keras weights file (HDF5), which holds no architecture: build the model and call "
                "model.load_weights(path) or rnnkit.load_keras_weights(model, path)",
        "onnx": "an ONNX graph: rnnkit writes ONNX (save_onnx) but does not read it; run it with "
                "onnxruntime, or convert the model it came from",
        "torch": f"a torch.save file (a zip archive holding a pickle); {never}",
        "pickle": f"a Python pickle (a legacy torch.save file); {never}",
        "zip": "a zip archive that is not a Keras '.keras' archive (no config.json and model.weights.h5)",
        "keras": "a Keras '.keras' archive (rnnkit.load_keras reads it)",
        "safetensors": "a safetensors file",
    }.get(kind)
    if what is None:
        size = os.path.getsize(path)
        with open_regular(path) as fh:
            head = fh.read(16)
        what = (f"not a safetensors file, nor any other file rnnkit reads: {size} bytes "
                f"starting {head!r}")
    return FileFormatError(f"{path}: expected {wanted}; found {what}")
