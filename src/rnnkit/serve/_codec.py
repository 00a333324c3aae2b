"""Request bodies in, answers out: JSON (numbers as nested lists) and ``.npy`` bytes, each
checked against the model's input contract before anything runs. Every refusal is a
:class:`~rnnkit.serve._errors.RequestError` naming what was wrong, what was expected and what
was given."""

from __future__ import annotations

import functools
import io
import json
from typing import Any

import numpy as np
import orjson

from rnnkit._budget import check_array
from rnnkit._errors import InvalidParameterError, MemoryBudgetError
from rnnkit._limits import LIMITS
from rnnkit._numbers import check_int
from rnnkit.serve._errors import RequestError, bad_request, unprocessable
from rnnkit.serve._limits import ServeConfig
from rnnkit.serve._servable import Servable
from rnnkit.timeseries import ForecastSpec

NPY_TYPES = ("application/x-npy", "application/octet-stream")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


#: one decoder for every request (``json.loads`` with an argument builds a new one per call)
_DECODER = json.JSONDecoder(parse_constant=_no_constant)


def parse_json(body: bytes) -> Any:
    """The JSON document in ``body`` (UTF-8; ``NaN`` / ``Infinity`` are refused, as JSON has no
    such numbers).

    orjson reads it (a request's numbers are most of its cost: orjson reads them about seven
    times faster); a body orjson refuses is read again by the standard library's decoder, which
    decides: it reads a number beyond the float range (``1e400``) as infinity, which the input
    checks then refuse by its position, and it says what is wrong with a malformed body."""
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError:
        pass
    try:
        return _DECODER.decode(body.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        raise bad_request("bad_json", f"the body is not valid JSON: {str(e)[:200]}",
                          expected="a UTF-8 JSON object") from None


def dump_json(doc: Any) -> bytes:
    """``doc`` as compact UTF-8 JSON (orjson; the standard library for what orjson cannot write:
    integers beyond 64 bits)."""
    try:
        return orjson.dumps(doc)
    except TypeError:
        return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()


def _within_budget(shape: tuple[int, ...], itemsize: int, what: str) -> None:
    """413 ``over_memory_budget`` when an array of ``shape`` would be larger than the memory
    budget (``LIMITS.max_array_bytes``, :func:`rnnkit._budget.check_array`): checked before
    the array is allocated; the message names the shape, its bytes, the budget and how the
    server's operator raises it."""
    try:
        check_array(shape, itemsize, what)
    except MemoryBudgetError as e:
        raise RequestError(413, "over_memory_budget", str(e), expected=LIMITS.max_array_bytes,
                           got=[int(d) for d in shape]) from None


def _json_shape(value: list[Any]) -> tuple[int, ...]:
    """The shape nested lists declare, read down their first elements (nothing allocated; a
    ragged document is refused later by NumPy)."""
    shape = []
    v: Any = value
    while isinstance(v, list):
        shape.append(len(v))
        if not v:
            break
        v = v[0]
    return tuple(shape)


def _npy_header(body: bytes) -> None:
    """Check a ``.npy`` header against the body before NumPy allocates what it declares: the
    shape's bytes must be exactly the bytes that follow the header (a header declaring
    (2, 3, 1e11) in a small body is refused here, not by a ``MemoryError``)."""
    buf = io.BytesIO(body)
    try:
        version = np.lib.format.read_magic(buf)
        if version == (1, 0):
            shape, _, dtype = np.lib.format.read_array_header_1_0(buf)
        elif version in ((2, 0), (3, 0)):
            shape, _, dtype = np.lib.format.read_array_header_2_0(buf)
        else:
            raise ValueError(f"unknown .npy format version {version}")
    except (ValueError, OSError, EOFError, TypeError, SyntaxError) as e:
        raise bad_request("bad_npy", f"the body is not a .npy array: {str(e)[:200]}",
                          expected="the bytes np.save writes, without pickled objects") from None
    if dtype.hasobject:
        raise bad_request("bad_npy", "the .npy array holds Python objects (pickled); send numbers",
                          expected="a numeric .npy array", got=str(dtype)[:60])
    declared = dtype.itemsize
    for d in shape:
        declared *= int(d)
    held = len(body) - buf.tell()
    if declared != held:
        raise unprocessable("bad_npy", f"the .npy header declares shape {tuple(int(d) for d in shape)} of "
                                       f"{dtype} ({declared} bytes of data), but the body holds {held} bytes "
                                       f"after the header", expected=held, got=declared)
    _within_budget(tuple(shape), dtype.itemsize, "the .npy body")   # (a header that lies is 422 first)


def parse_npy(body: bytes) -> np.ndarray:
    """The array in ``.npy`` bytes (never unpickled), its header checked against the body's
    length before anything is allocated."""
    _npy_header(body)
    try:
        arr = np.load(io.BytesIO(body), allow_pickle=False)
    except (ValueError, OSError, EOFError, TypeError) as e:
        raise bad_request("bad_npy", f"the body is not a .npy array: {str(e)[:200]}",
                          expected="the bytes np.save writes, without pickled objects") from None
    if not isinstance(arr, np.ndarray):
        raise bad_request("bad_npy", "the body holds several arrays (an .npz); send one .npy array")
    return arr


@functools.lru_cache(maxsize=64)
def _shape_text(shape: tuple[Any, ...]) -> str:
    return "(" + ", ".join("any" if d is None else str(d) for d in shape) + ")"


def _json_array(value: Any, what: str, want_text: str, of: str = "") -> np.ndarray:
    """A JSON request's nested lists as an array, or 422 ``bad_input``: not a list, or not
    rectangular (ragged rows, mixed types). ``of`` says what the numbers are."""
    if not isinstance(value, list):
        raise unprocessable("bad_input", f"{what} must be an array {want_text} of numbers{of}, got a JSON "
                                         f"{type(value).__name__}", expected=want_text)
    _within_budget(_json_shape(value), 8, what)   # JSON numbers become int64 / float64
    try:
        return np.asarray(value)
    except (ValueError, TypeError, OverflowError, RecursionError):
        raise unprocessable("bad_input", f"{what} is not a rectangular array of numbers (ragged rows, or "
                                         f"mixed types)", expected=want_text) from None


def as_input(value: Any, sv: Servable, cfg: ServeConfig, what: str, *, stream: bool) -> np.ndarray:
    """``value`` (nested lists from JSON, or an array from ``.npy``) as a checked input array in
    the model's input dtype: a batch (B, T, ...) for predict, or the timesteps (T, features) of
    one stream step (``stream=True``)."""
    per_step = sv.sample_shape[1:]
    want = (None, *per_step) if stream else (None, None, *per_step)
    want_text = _shape_text(("T", *per_step) if stream else ("batch", "T", *per_step))
    if isinstance(value, np.ndarray):
        arr = value
        if arr.dtype != sv.input_dtype:
            raise unprocessable("bad_dtype", f"{what} has dtype {arr.dtype}; the model takes "
                                             f"{sv.input_dtype}",
                                expected=sv.input_dtype.name, got=str(arr.dtype))
    else:
        arr = _json_array(value, what, want_text)
        if arr.dtype.kind not in "iuf" or arr.dtype.kind == "f" and sv.input_dtype.kind in "iu":
            got = {"b": "booleans", "U": "strings", "O": "mixed values or huge integers"}.get(
                arr.dtype.kind, "non-integers" if arr.dtype.kind == "f" else str(arr.dtype))
            kind = "integers" if sv.input_dtype.kind in "iu" else "numbers"
            raise unprocessable("bad_dtype", f"{what} must hold {kind}, got {got}",
                                expected=sv.input_dtype.name, got=got)
    if arr.ndim != len(want) or any(w is not None and w != g for w, g in zip(want, arr.shape, strict=False)):
        raise unprocessable("bad_shape", f"{what} has shape {arr.shape}; expected {want_text}",
                            expected=want_text, got=list(arr.shape))
    t_axis = 0 if stream else 1
    fixed_t = sv.sample_shape[0]
    if arr.size == 0 or 0 in arr.shape:
        raise unprocessable("empty", f"{what} has shape {arr.shape}: no samples or no timesteps",
                            expected=want_text, got=list(arr.shape))
    if arr.shape[t_axis] > cfg.max_timesteps:
        raise RequestError(413, "too_many_timesteps", f"{what} has {arr.shape[t_axis]} timesteps; at most "
                                                      f"{cfg.max_timesteps} per request",
                           expected=cfg.max_timesteps, got=arr.shape[t_axis])
    if not stream and fixed_t is not None and arr.shape[1] != fixed_t:
        raise unprocessable("bad_shape", f"{what} has {arr.shape[1]} timesteps; the model was built for "
                                         f"{fixed_t}", expected=fixed_t, got=arr.shape[1])
    if not stream and arr.shape[0] > cfg.max_batch:
        raise RequestError(413, "too_many_sequences", f"{what} holds {arr.shape[0]} sequences; at most "
                                                      f"{cfg.max_batch} per request",
                           expected=cfg.max_batch, got=arr.shape[0])
    if sv.input_dtype.kind in "iu":
        vocab = int(getattr(getattr(sv.model, "called_layers", sv.model.layers)[0], "input_dim", 0))
        lo, hi = int(arr.min()), int(arr.max())
        if lo < 0 or hi >= vocab:
            raise unprocessable("out_of_range", f"{what} holds token ids in [{lo}, {hi}]; the model's "
                                                f"vocabulary is [0, {vocab})", expected=[0, vocab - 1],
                                got=[lo, hi])
        return arr.astype(sv.input_dtype)
    with np.errstate(over="ignore", invalid="ignore"):
        out = arr.astype(sv.dtype)
    bad = ~np.isfinite(out)
    if bad.any():
        pos = [int(i) for i in np.argwhere(bad)[0]]
        src = arr[tuple(pos)]
        why = "not finite" if not np.isfinite(src) else f"beyond the {sv.dtype.name} range"
        raise unprocessable("non_finite", f"{what}{pos} is {why}", expected="finite numbers", got=str(src))
    return np.ascontiguousarray(out)


def as_rows(value: Any, spec: ForecastSpec, cfg: ServeConfig, what: str) -> np.ndarray:
    """``value`` (nested lists from JSON, or a float64 array from ``.npy``) as a forecaster's
    windows of raw data rows, float64 (B, rows per window, features), finite."""
    want = (spec.rows_needed, len(spec.features))
    want_text = _shape_text(("batch", *want))
    if isinstance(value, np.ndarray):
        if value.dtype != np.float64:
            raise unprocessable("bad_dtype", f"{what} has dtype {value.dtype}; a forecaster reads data rows "
                                             f"as float64", expected="float64", got=str(value.dtype))
        arr = value
    else:
        arr = _json_array(value, what, want_text, f" (raw data rows of {', '.join(spec.features)})")
        if arr.dtype.kind not in "iuf":
            raise unprocessable("bad_dtype", f"{what} must hold numbers, got {arr.dtype}",
                                expected="numbers", got=str(arr.dtype))
        arr = arr.astype(np.float64)
    if arr.ndim != 3 or arr.shape[1:] != want or arr.shape[0] == 0:
        raise unprocessable("bad_shape", f"{what} has shape {arr.shape}; expected {want_text}: windows of "
                                         f"{want[0]} data rows of {', '.join(spec.features)}",
                            expected=want_text, got=list(arr.shape))
    if arr.shape[0] > cfg.max_batch:
        raise RequestError(413, "too_many_sequences", f"{what} holds {arr.shape[0]} windows; at most "
                                                      f"{cfg.max_batch} per request",
                           expected=cfg.max_batch, got=arr.shape[0])
    bad = ~np.isfinite(arr)
    if bad.any():
        pos = [int(i) for i in np.argwhere(bad)[0]]
        raise unprocessable("non_finite", f"{what}{pos} is not finite", expected="finite numbers",
                            got=str(arr[tuple(pos)]))
    return np.ascontiguousarray(arr)


def as_levels(value: Any, batch: int, what: str) -> np.ndarray:
    """``value`` (a JSON list, or text ``1.5,2.25`` from a query) as (batch,) finite float64."""
    if isinstance(value, str):
        try:
            value = [float(v) for v in value.split(",") if v.strip()]
        except ValueError:
            raise unprocessable("bad_target", f"{what} must be numbers separated by commas") from None
    try:
        arr = np.asarray(value, dtype=np.float64) if isinstance(value, list) else None
    except (ValueError, TypeError):
        arr = None
    if arr is None or arr.shape != (batch,) or not np.isfinite(arr).all():
        raise unprocessable("bad_target", f"{what} must be {batch} finite numbers (one per window)",
                            expected=f"({batch},) numbers",
                            got=None if arr is None else f"shape {list(arr.shape)}")
    return arr


def as_lengths(value: Any, batch: int, T: int, sv: Servable) -> np.ndarray:
    """``lengths``: (batch,) integers in [1, T]."""
    if not sv.lengths_ok:
        raise unprocessable("lengths_unsupported", "this model cannot take lengths (a layer of it refuses "
                                                   "masks)")
    if isinstance(value, str):
        value = [v for v in value.split(",") if v.strip()]
        try:
            value = [int(v) for v in value]
        except ValueError:
            raise unprocessable("bad_lengths", "lengths must be integers separated by commas") from None
    arr = np.asarray(value) if isinstance(value, list) else None
    if arr is None or arr.ndim != 1 or arr.dtype.kind not in "iu" or arr.shape[0] != batch:
        raise unprocessable("bad_lengths", f"lengths must be {batch} integers (one per sequence)",
                            expected=f"({batch},) integers in [1, {T}]",
                            got=None if arr is None else f"shape {list(arr.shape)} of {arr.dtype}")
    if arr.min() < 1 or arr.max() > T:
        raise unprocessable("bad_lengths", f"lengths must lie in [1, {T}] (the timesteps), got "
                                           f"[{int(arr.min())}, {int(arr.max())}]", expected=[1, T])
    return arr.astype(np.int64)


def as_mask(value: Any, batch: int, T: int, sv: Servable) -> np.ndarray:
    """``mask``: (batch, T) booleans (or 0 / 1), True at the real timesteps."""
    if not sv.lengths_ok:
        raise unprocessable("mask_unsupported", "this model cannot take a mask (a layer of it refuses masks)")
    try:
        arr = np.asarray(value) if isinstance(value, list) else None
    except (ValueError, TypeError):
        arr = None
    ok = arr is not None and arr.shape == (batch, T) and (
        arr.dtype == np.bool_ or arr.dtype.kind in "iu" and bool(np.isin(arr, (0, 1)).all()))
    if not ok:
        raise unprocessable("bad_mask", f"mask must be ({batch}, {T}) booleans, one per timestep",
                            expected=f"({batch}, {T}) booleans",
                            got=None if arr is None else f"shape {list(arr.shape)} of {arr.dtype}")
    assert arr is not None
    return arr.astype(bool)


def as_seq(value: Any) -> int:
    """A step's sequence number: an int in ``[1, 2**62)`` (:func:`rnnkit._numbers.check_int`:
    a bool, a float, a number beyond the range are 422 ``bad_seq``)."""
    try:
        return check_int(value, "seq (the step's sequence number, 1 for the first step)", "step",
                         lo=1, hi=2**62 - 1)
    except InvalidParameterError as e:
        raise unprocessable("bad_seq", str(e), expected="an integer >= 1") from None


def field_of(doc: Any, name: str, *, required: bool = True) -> Any:
    """``doc[name]`` of a JSON object (422 when ``doc`` is not an object or lacks a required key)."""
    if not isinstance(doc, dict):
        raise unprocessable("bad_body", f"the body must be a JSON object, got a {type(doc).__name__}",
                            expected="a JSON object")
    if required and name not in doc:
        raise unprocessable("missing_field", f"the body has no {name!r}; it has {sorted(doc)[:10]}",
                            expected=name)
    return doc.get(name)


def to_json(arrays: list[np.ndarray]) -> Any:
    """The outputs as JSON values: one array as nested lists; several as a list of them."""
    for a in arrays:
        if not np.isfinite(a).all():
            raise unprocessable("non_finite_output", "the model's output is not finite for this input")
    vals = [a.tolist() for a in arrays]
    return vals[0] if len(vals) == 1 else vals


def to_npy(arr: np.ndarray) -> bytes:
    """``arr`` as ``.npy`` bytes."""
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


__all__ = ["NPY_TYPES", "as_input", "as_lengths", "as_levels", "as_mask", "as_rows", "as_seq", "field_of",
           "dump_json", "parse_json", "parse_npy", "to_json", "to_npy"]
