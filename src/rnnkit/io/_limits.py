"""Bounds every reader checks BEFORE it allocates or decompresses.

A file states sizes (a zip entry's uncompressed size, a JSON document's nesting, the units of
a layer in a config, an HDF5 dataset's shape). A reader compares each statement with what the
file itself holds and with the limits below, and refuses with :class:`FileFormatError` when
one is exceeded, before the memory is spent. The defaults admit any model rnnkit trains on a
CPU; raise them for a trusted larger file::

    import rnnkit.io
    old = rnnkit.io.set_limits(max_archive_entry_bytes=8 << 30)   # returns the previous limits
    ...
    rnnkit.io.set_limits(**old)

=========================  =========  =====================================================
limit                      default    what it bounds
=========================  =========  =====================================================
max_json_bytes             16 MiB     a JSON document: ``config.json``, model metadata
max_json_depth             100        nesting of ``[`` / ``{`` in such a document
max_archive_entry_bytes    1 GiB      an uncompressed entry of a ``.keras`` archive
max_compression_ratio      100        uncompressed / compressed size of an entry > 1 MiB
=========================  =========  =====================================================

A model file's architecture may not declare far more weight numbers than the file holds: a
config that does (``Embedding(200_000_000, 1)`` in a 340-byte file) is refused before the weight
is drawn (:func:`rnnkit._budget.allocation_budget`).
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from rnnkit._errors import FileFormatError, InvalidParameterError


@dataclass
class Limits:
    max_json_bytes: int = 16 << 20
    max_json_depth: int = 100
    max_archive_entry_bytes: int = 1 << 30
    max_compression_ratio: float = 100.0


LIMITS = Limits()


def set_limits(**changes: Any) -> dict[str, Any]:
    """Change reader limits (see the module doc); returns the previous values, so
    ``set_limits(**old)`` restores them. Unknown names and non-positive values are refused."""
    known = {f.name for f in fields(Limits)}
    for k, v in changes.items():
        if k not in known:
            raise InvalidParameterError(f"set_limits: unknown limit {k!r}; the limits are {sorted(known)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise InvalidParameterError(f"set_limits: {k} must be a number > 0, got {v!r}")
    old = asdict(LIMITS)
    for k, v in changes.items():
        setattr(LIMITS, k, type(getattr(LIMITS, k))(v))
    return old


_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays/objects in a JSON document (strings skipped)."""
    bare = _STRING.sub(b"", data)
    a = np.frombuffer(bare, dtype=np.uint8)
    step = np.isin(a, (ord("["), ord("{"))).astype(np.int64) - np.isin(a, (ord("]"), ord("}")))
    return int(np.cumsum(step).max()) if step.size else 0


def parse_json(data: bytes | str, where: str) -> Any:
    """``json.loads`` after the size and depth limits; FileFormatError naming ``where``."""
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if len(raw) > LIMITS.max_json_bytes:
        raise FileFormatError(f"{where}: a JSON document of {len(raw)} bytes, over the limit of "
                              f"{LIMITS.max_json_bytes} (rnnkit.io.set_limits(max_json_bytes=...))")
    depth = json_depth(raw)
    if depth > LIMITS.max_json_depth:
        raise FileFormatError(f"{where}: JSON nested {depth} levels deep, over the limit of "
                              f"{LIMITS.max_json_depth} (rnnkit.io.set_limits(max_json_depth=...))")
    try:
        return json.loads(raw)
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        raise FileFormatError(f"{where}: not JSON ({e})") from None
