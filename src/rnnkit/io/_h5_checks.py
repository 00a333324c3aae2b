"""What an HDF5 weights file may contain before rnnkit reads a number from it.

HDF5 can make a dataset read bytes that are not in the file: external storage (raw data in
any named file: ``/proc/self/environ``, a secret, a FIFO that blocks forever), virtual datasets
(data mapped from other files), external links (objects of another file), soft links (names
pointing anywhere, dangling or through an external link). Filters outside the standard set
run plugin code. Keras writes none of these. So every link under the weights group must be a
hard link, and every dataset must satisfy :func:`check_dataset` before it is read:

- layout contiguous, chunked or compact, with no external storage (virtual is refused);
- filters only gzip (deflate), shuffle, fletcher32 and lzf;
- an integer or floating-point type (compound, variable-length, string, enum, array,
  reference and opaque types are refused where a number is expected);
- its decoded size within what the file stores for it: unfiltered data may not be larger than
  its allocated storage (unwritten "holes" would be filled from nothing), compressed data not
  more than ``max_compression_ratio`` times larger; one chunk not larger than the dataset
  allows (a chunk may exceed an extendible dataset's shape).

Each refusal is a :class:`FileFormatError` naming the file and the dataset.
"""

from __future__ import annotations

import math
from typing import Any

from rnnkit._errors import FileFormatError
from rnnkit._limits import LIMITS

#: HDF5 filter ids rnnkit decodes: deflate (gzip), shuffle, fletcher32, lzf
STANDARD_FILTERS = {1: "gzip", 2: "shuffle", 3: "fletcher32", 32000: "lzf"}
_COMPRESSING = {1, 32000}
_LAYOUTS = {0: "compact", 1: "contiguous", 2: "chunked", 3: "virtual"}
_TYPE_CLASSES = {0: "integer", 1: "float", 2: "time", 3: "string", 4: "bitfield", 5: "opaque",
                 6: "compound", 7: "reference", 8: "enum", 9: "variable-length", 10: "array"}


def _text(b: Any) -> str:
    return b.decode("utf-8", "replace") if isinstance(b, bytes) else str(b)


def check_links(group: Any, h5py: Any, source: str, prefix: str) -> None:
    """FileFormatError naming the first link under ``group`` that is not a hard link.

    The walk reads each link's own record (H5Lvisit with its link info) and never resolves a
    link: h5py's ``visititems_links`` tests ``name in group``, which follows an external link
    into the file it names."""
    found: list[tuple[str, int]] = []

    def visit(name: bytes, info: Any) -> Any:
        if info.type != h5py.h5l.TYPE_HARD:
            found.append((name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name),
                          int(info.type)))
            return True  # stop the walk
        return None

    group.id.links.visit(visit, info=True)
    if found:
        name, kind = found[0]
        val = group.id.links.get_val(name.encode("utf-8", "surrogateescape"))
        if kind == h5py.h5l.TYPE_EXTERNAL:
            what = f"an external link to {_text(val[1])!r} in file {_text(val[0])!r}"
        elif kind == h5py.h5l.TYPE_SOFT:
            what = f"a soft link to {_text(val)!r}"
        else:
            what = f"a user-defined link (type {kind})"
        raise FileFormatError(f"{source}: {prefix + name!r} is {what}; a weights file may hold only its "
                              f"own groups and datasets (hard links); refused before reading")


def check_dataset(ds: Any, h5py: Any, source: str, full: str, left: int) -> tuple[int, int]:
    """Refuse ``ds`` (see the module doc) or return ``(decoded bytes, stored bytes)``; ``left``:
    the bytes of the file that earlier datasets have not claimed, which its storage may not
    exceed."""
    where = f"{source}: dataset {full!r}"
    cls = ds.id.get_type().get_class()
    if cls not in (h5py.h5t.INTEGER, h5py.h5t.FLOAT) or ds.dtype.kind not in "iuf":
        kind = _TYPE_CLASSES.get(int(cls), f"class {cls}")
        raise FileFormatError(f"{where} holds {kind} values ({ds.dtype}); expected integer or "
                              f"floating-point numbers")
    dcpl = ds.id.get_create_plist()
    layout = int(dcpl.get_layout())
    if layout not in (0, 1, 2):
        raise FileFormatError(f"{where} has {_LAYOUTS.get(layout, f'layout {layout}')} storage (data "
                              f"mapped from other files); expected contiguous, chunked or compact "
                              f"storage in the file itself")
    if dcpl.get_external_count():
        name = dcpl.get_external(0)[0]
        name = name.decode("utf-8", "replace") if isinstance(name, bytes) else str(name)
        raise FileFormatError(f"{where} keeps its data in an external file ({name!r}); expected its "
                              f"data in the file itself; refused before reading")
    filters = [dcpl.get_filter(i) for i in range(dcpl.get_nfilters())]
    for f in filters:
        if int(f[0]) not in STANDARD_FILTERS:
            raise FileFormatError(f"{where} uses HDF5 filter {int(f[0])} ({_text(f[3])!r}); expected only "
                                  f"{', '.join(STANDARD_FILTERS.values())}")
    nbytes = math.prod(int(d) for d in ds.shape) * ds.dtype.itemsize
    storage = int(ds.id.get_storage_size())
    if storage > left:
        raise FileFormatError(f"{where} states {storage} bytes of storage but only {left} bytes of the "
                              f"file are not claimed by other datasets; refused before reading")
    compressed = any(int(f[0]) in _COMPRESSING for f in filters)
    allowed = storage * LIMITS.max_compression_ratio if compressed else storage
    if nbytes > allowed:
        how = (f"{storage} bytes compressed at most {LIMITS.max_compression_ratio:g}-fold"
               if compressed else f"{storage} bytes stored in the file")
        raise FileFormatError(f"{where} declares shape {ds.shape} ({nbytes} bytes) but has {how}; "
                              f"refused before reading")
    if layout == 2:
        chunk = math.prod(int(d) for d in dcpl.get_chunk()) * ds.dtype.itemsize
        if chunk > max(nbytes, 1 << 20):
            raise FileFormatError(f"{where} declares chunks of {dcpl.get_chunk()} ({chunk} bytes), "
                                  f"larger than its {nbytes} bytes of data; refused before reading")
    return nbytes, storage
