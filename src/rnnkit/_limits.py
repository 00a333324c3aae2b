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
max_array_bytes            8 GiB      one array a size given by a caller or a file makes
                                      (weights of ``units``, ``RepeatVector(n)``'s output,
                                      ``zero_state(batch)``): MemoryBudgetError otherwise
=========================  =========  =====================================================

A model file's architecture may not declare far more weight numbers than the file holds: a
config that does (``Embedding(200_000_000, 1)`` in a 340-byte file) is refused before the weight
is drawn (:func:`rnnkit._budget.allocation_budget`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np

from rnnkit._errors import FileFormatError, InvalidParameterError
from rnnkit._numbers import check_float, check_int


@dataclass
class Limits:
    max_json_bytes: int = 16 << 20
    max_json_depth: int = 100
    max_archive_entry_bytes: int = 1 << 30
    max_compression_ratio: float = 100.0
    max_array_bytes: int = 8 << 30


LIMITS = Limits()


def set_limits(**changes: Any) -> dict[str, Any]:
    """Change reader limits (see the module doc); returns the previous values, so
    ``set_limits(**old)`` restores them. Unknown names are refused, and so is a value the one
    number check (:mod:`rnnkit._numbers`) refuses: the byte and depth limits are ints in
    ``[1, 2**63 - 1]`` (``7.0``, ``True``, ``10**400`` refused), ``max_compression_ratio`` a
    finite real > 0: InvalidParameterError naming the limit, the value and what it must be.
    Nothing changes unless every value given is valid."""
    known = {f.name: f for f in fields(Limits)}
    checked: dict[str, int | float] = {}
    for k, v in changes.items():
        if k not in known:
            raise InvalidParameterError(f"set_limits: unknown limit {k!r}; the limits are {sorted(known)}")
        if known[k].type in (int, "int"):
            checked[k] = check_int(v, k, "set_limits", lo=1)
        else:
            checked[k] = check_float(v, k, "set_limits", lo=0.0, lo_open=True)
    old = asdict(LIMITS)
    for k, v in checked.items():
        setattr(LIMITS, k, v)
    return old


_CHUNK = 1 << 18
_OPEN = np.zeros(256, np.int8)
_OPEN[[ord("["), ord("{")]] = 1
_OPEN[[ord("]"), ord("}")]] = -1


def json_depth(data: bytes) -> int:
    """The deepest nesting of arrays/objects in a JSON document, brackets inside strings not
    counted (a quote after an odd run of backslashes is escaped, as in JSON).

    One pass over the bytes in blocks of 256 KiB, carrying the depth, whether a string is open
    and the length of a trailing run of backslashes from block to block: time linear in the
    input, memory a few bytes per byte of one block, whatever the document (an unterminated
    string, a run of ``\\"``, deep nesting)."""
    a_all = np.frombuffer(data, dtype=np.uint8)
    depth, deepest, in_string, run = 0, 0, False, 0
    for start in range(0, a_all.size, _CHUNK):
        a = a_all[start:start + _CHUNK]
        n = a.size
        idx = np.arange(n, dtype=np.int32)
        last_plain = np.maximum.accumulate(np.where(a != 92, idx, -1))  # last non-backslash <= i
        q = np.flatnonzero(a == 34).astype(np.int32)
        # the run of backslashes just before quote i: i-1 - last_plain[i-1], plus the carried
        # run when the block up to i holds only backslashes
        prev = np.where(q > 0, last_plain[np.maximum(q - 1, 0)], -1)
        before = q - 1 - prev + np.where(prev < 0, run, 0)
        real = np.zeros(n, np.int8)
        real[q[before % 2 == 0]] = 1
        parity = np.bitwise_xor.accumulate(real)
        if in_string:
            parity ^= 1
        step = _OPEN[a]
        step[parity == 1] = 0
        if step.any():
            levels = np.cumsum(step, dtype=np.int32)
            deepest = max(deepest, depth + int(levels.max()))
            depth += int(levels[-1])
        in_string = bool(parity[-1])
        run = n - 1 - int(last_plain[-1]) + (run if last_plain[-1] < 0 else 0)
    return deepest


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
