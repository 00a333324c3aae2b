"""Whole-model import from Keras 3 files, without Keras: ``load_keras`` and ``load_keras_weights``.

A ``.keras`` file is a zip archive holding ``config.json`` (the architecture, parsed here with
:mod:`json`), ``metadata.json`` and ``model.weights.h5`` (the weights, read with h5py — an
optional dependency: ``pip install rnnkit[interop]``). Nothing is unpickled and Keras is never
imported.

Layers and options (Keras 3.15.1 configs; anything else raises
:class:`~rnnkit.io.UnsupportedFeatureError` naming the layer and the option)::

    Keras                         rnnkit
    InputLayer(batch_shape)       the model's input shape (batch axis free)
    SimpleRNN / LSTM / GRU        SimpleRNN / LSTM / GRU(reset_after=...) with units, activation,
                                  return_sequences, go_backwards; kernel and recurrent_kernel as
                                  they are (same fused gate orders), bias (G*H,) ->
                                  (1, G*H), GRU reset_after=True bias (2, 3H) kept
        use_bias=False            an exact zero bias (note: rnnkit then trains that bias)
        return_state, stateful, dropout, recurrent_dropout   the same options of the rnnkit
                                  layer (SimpleRNN's recurrent_dropout: accepted with a warning)
        recurrent_activation softmax   refused
        unroll, unit_forget_bias, initializers, seed, zero_output_for_mask   no effect on a
                                  trained model: ignored
    Bidirectional(merge_mode=concat | sum | mul | ave | None, backward_layer)
                                  Bidirectional (the directions' weights forward.* / backward.*)
    Dense                         Dense(units, activation, use_bias)
    Embedding                     Embedding(input_dim, output_dim, mask_zero)
    Masking(mask_value)           Masking(mask_value)
    Add, Multiply, Average        Add, Multiply, Average (functional models)
    Dropout(rate)                 Dropout(rate); noise_shape accepted with a warning
    RepeatVector(n)               RepeatVector(n)
    Activation                    ActivationLayer
    Concatenate(axis)             Concatenate(axis)
    TimeDistributed(Dense | Dropout | Activation)   the inner layer (rnnkit's act on the last
                                  axis, i.e. per timestep, already)

Activations: tanh, sigmoid, relu, linear, softmax (others refused). Dtype policies float32 and
float64; mixed / half precision refused. Keras' regularizers (L1, L2, L1L2) and constraints
(MaxNorm, NonNeg, UnitNorm, MinMaxNorm) are carried over and act in training as in Keras;
custom ones are accepted with a warning (they act only in training). LoRA and quantized layers
are refused.

Models: a Keras ``Sequential`` becomes an rnnkit :class:`~rnnkit.Sequential` (layer ``i`` =
the ``i``-th non-input Keras layer). A functional model (``Functional``; shared layers, several
inputs/outputs, merges) becomes a GraphModel whose nodes are named after the Keras layers (a
second call of a shared layer: ``{name}__{k}``). A layer with several outputs
(``return_state=True``, ``merge_mode=None``) is a node with several outputs; its tensors are
``node[k]``. ``initial_state=`` becomes the node's input list ``[x, *states]``. Masks follow
from Masking / ``mask_zero`` as in Keras; an explicit ``mask=`` argument is refused. Nested
models are refused. A compiled model comes back compiled: its optimizer with Keras' update
equations (``formula="keras"``) and hyperparameters, its loss and metrics (what maps and what is
left uncompiled with a warning: :mod:`rnnkit.io._keras_compile`).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
import zlib
from collections.abc import Iterator
from typing import Any, BinaryIO

from rnnkit._budget import allocation_budget
from rnnkit._errors import Error, FileFormatError, WeightShapeError
from rnnkit._files import check_regular, read_head
from rnnkit._layer import Layer
from rnnkit._limits import LIMITS, parse_json
from rnnkit.io._interop_errors import UnsupportedFeatureError
from rnnkit.io._keras_compile import compile_from_keras
from rnnkit.io._keras_graph import Ref, inbound, layer_name, mask_ops, tensor
from rnnkit.io._keras_graph import refs as tensor_refs
from rnnkit.io._keras_h5 import WeightStore, unique_groups
from rnnkit.io._keras_layers import MHA_GROUPS, RECURRENT, Mapped, map_layer, to_rnnkit_weights
from rnnkit.io._weights import apply_strict
from rnnkit.layers import Bidirectional, Dense, Embedding, MergeLayer, MultiHeadAttention
from rnnkit.models import GraphBuilder, GraphModel, Sequential
from rnnkit.models._graph import Node
from rnnkit.recurrent import RecurrentLayer

_WEIGHTS = "model.weights.h5"


def _check_path(p: str) -> None:
    """A regular readable file at ``p`` (see :func:`~rnnkit._files.check_regular`)."""
    if os.path.isdir(p):
        raise FileFormatError(f"{p}: expected a Keras '.keras' file, found a directory (a TensorFlow "
                              f"SavedModel cannot be read; re-save the model with model.save('m.keras'))")
    check_regular(p, "a Keras file")


def _copy_entry(z: zipfile.ZipFile, name: str, p: str, out: BinaryIO | None) -> bytes:
    """Stream one archive entry into ``out`` (a file) 1 MiB at a time, or, without ``out``,
    into bytes. Its stated size is checked against the limits before anything is decompressed
    or allocated, and the read itself is capped (a lying header cannot make it longer); bytes
    are read into one buffer of the stated size, never joined from pieces."""
    info = z.getinfo(name)
    cap = LIMITS.max_json_bytes if name.endswith(".json") else LIMITS.max_archive_entry_bytes
    if info.file_size > cap:
        raise FileFormatError(f"{p}: archive entry {name!r} states {info.file_size} bytes uncompressed, "
                              f"over the limit of {cap} (rnnkit.io.set_limits)")
    ratio = info.file_size / max(info.compress_size, 1)
    if info.file_size > (1 << 20) and ratio > LIMITS.max_compression_ratio:
        raise FileFormatError(f"{p}: archive entry {name!r} expands {ratio:.0f}-fold ({info.compress_size} "
                              f"-> {info.file_size} bytes), over the limit of "
                              f"{LIMITS.max_compression_ratio:g} (rnnkit.io.set_limits)")
    buf = bytearray(0 if out is not None else info.file_size)
    total = 0
    try:
        with z.open(info) as fh:
            while chunk := fh.read(1 << 20):
                if total + len(chunk) > info.file_size:
                    raise FileFormatError(f"{p}: archive entry {name!r} holds more than it states "
                                          f"({info.file_size} bytes)")
                if out is not None:
                    out.write(chunk)
                else:
                    buf[total:total + len(chunk)] = chunk
                total += len(chunk)
    except (zipfile.BadZipFile, EOFError, OSError, NotImplementedError, RuntimeError, zlib.error) as e:
        raise FileFormatError(f"{p}: archive entry {name!r} cannot be read ({e})") from None
    if total != info.file_size:
        raise FileFormatError(f"{p}: archive entry {name!r} holds {total} bytes, not the {info.file_size} "
                              f"it states")
    return b"" if out is not None else bytes(buf)


@contextlib.contextmanager
def _read_archive(p: str) -> Iterator[tuple[dict[str, Any], BinaryIO]]:
    """``(config, weights h5 file)`` of a ``.keras`` zip archive, entry by entry, bounded: the
    weights are streamed into an anonymous temporary file (gone when the block ends), so the
    memory a load uses is the arrays it keeps, not the archive's bytes as well."""
    _check_path(p)
    head = read_head(p, 16, "a Keras file")
    if head.startswith(b"\x89HDF"):
        raise FileFormatError(f"{p}: an HDF5 file, not a '.keras' archive: a '.weights.h5' file (read it "
                              f"with load_keras_weights into a built model) or a Keras 2 '.h5' model "
                              f"(re-save it with Keras 3 as '.keras')")
    if not zipfile.is_zipfile(p):
        raise FileFormatError(f"{p}: not a Keras '.keras' archive (a zip file); found "
                              f"{os.path.getsize(p)} bytes starting {head!r}")
    try:
        z = zipfile.ZipFile(p)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError) as e:
        raise FileFormatError(f"{p}: a damaged zip archive ({e})") from None
    with z, tempfile.TemporaryFile(prefix="rnnkit-keras-") as weights:
        names = z.namelist()
        if any(n.endswith("data.pkl") for n in names):
            raise FileFormatError(f"{p}: a torch.save archive, not a '.keras' file")
        if "config.json" not in names:
            raise FileFormatError(f"{p}: a zip archive without config.json is not a '.keras' file "
                                  f"(it holds {names[:10]})")
        if _WEIGHTS not in names:
            raise FileFormatError(f"{p}: the archive has no {_WEIGHTS} (found {names[:10]}); sharded or "
                                  f"weightless Keras archives are not supported")
        config = parse_json(_copy_entry(z, "config.json", p, None), f"{p}:config.json")
        if not isinstance(config, dict) or not isinstance(config.get("config"), dict):
            raise FileFormatError(f"{p}: config.json holds no model config")
        try:
            _copy_entry(z, _WEIGHTS, p, weights)
            weights.flush()
            weights.seek(0)
        except OSError as e:
            raise FileFormatError(f"{p}: the weights could not be copied to a temporary file "
                                  f"({e.strerror or e})") from None
        yield config, weights


def _batch_shape(cfg: dict[str, Any]) -> tuple[int | None, ...]:
    c = cfg.get("config", {})
    shape = c.get("batch_shape", c.get("batch_input_shape"))
    if not isinstance(shape, list):
        raise FileFormatError(f"Keras InputLayer {c.get('name')!r} has no batch_shape")
    return tuple(shape)


def _safe(name: str) -> str:
    return name.replace(".", "_")


def _call(b: GraphBuilder, m: Mapped, ins: list[Node], k: int) -> Node:
    """Add the k-th call of the mapped Keras layer ``m`` on ``ins`` to the graph."""
    name = _safe(m.name) + (f"__{k}" if k else "")
    assert m.layer is not None
    if not ins:
        raise FileFormatError(f"call {k} of layer {m.name!r} reads no tensor")
    return b.add(m.layer, ins if len(ins) > 1 or isinstance(m.layer, MergeLayer) else ins[0], name=name)


def _sequential(cfg: dict[str, Any], top: dict[str, Any]) -> tuple[Any, list[Mapped], list[str]]:
    shape: Any = None
    mapped: list[Mapped] = []
    for lc in cfg.get("layers", []):
        m = map_layer(lc)
        if m.class_name == "InputLayer":
            shape = _batch_shape(lc)
        else:
            mapped.append(m)
    if shape is None:
        shape = cfg.get("build_input_shape") or (top.get("build_config") or {}).get("input_shape")
    if shape is None:
        raise FileFormatError("the Keras Sequential model was never built (no input shape in config.json)")
    if not mapped:
        raise FileFormatError("the Keras Sequential model has no layers")
    name = str(cfg.get("name", "sequential"))
    groups = unique_groups([m.class_name for m in mapped])
    layers = [m.layer for m in mapped]
    return Sequential([x for x in layers if x is not None], input_shape=shape, name=name), mapped, groups


def _call_order(pending: list[tuple[Mapped, int, list[Ref]]],
                made: set[tuple[str, int]]) -> list[tuple[Mapped, int, list[Ref]]]:
    """The calls of ``pending`` (in file order) in the order the graph is built: by level (a
    call reading only the ``made`` calls, the inputs, is level 1; any other one level above the
    highest call it reads), file order within a level. Kahn's algorithm with a count of the
    calls each one still waits for: linear in the number of calls and references.
    FileFormatError naming the first call in file order that can never run (it reads a call
    the file does not have, or a cycle)."""
    waiting: dict[tuple[str, int], list[int]] = {}   # a call -> the pending calls reading it
    left: list[int] = []                             # per pending call: calls it still waits for
    for i, (_, _, refs) in enumerate(pending):
        wanted = {r[:2] for r in refs} - made
        left.append(len(wanted))
        for key in wanted:
            waiting.setdefault(key, []).append(i)
    level = [1] * len(pending)
    ready = [i for i in range(len(pending)) if left[i] == 0]
    at = 0
    while at < len(ready):
        i = ready[at]
        at += 1
        m, k, _ = pending[i]
        for j in waiting.pop((m.name, k), []):
            level[j] = max(level[j], level[i] + 1)
            left[j] -= 1
            if left[j] == 0:
                ready.append(j)
    if len(ready) < len(pending):
        first = next(i for i in range(len(pending)) if left[i])
        done = made | {(pending[i][0].name, pending[i][1]) for i in ready}
        raise FileFormatError(f"the functional graph cannot be resolved: {pending[first][0].name!r} waits "
                              f"for {[r for r in pending[first][2] if r[:2] not in done]}")
    return [pending[i] for i in sorted(ready, key=lambda i: (level[i], i))]


def _functional(cfg: dict[str, Any]) -> tuple[Any, list[Mapped], list[str]]:
    b = GraphBuilder(str(cfg.get("name", "functional")))
    nodes: dict[tuple[str, int], Node] = {}
    mapped: list[Mapped] = []
    pending: list[tuple[Mapped, int, list[Ref]]] = []
    layer_cfgs = cfg.get("layers", [])
    ops = mask_ops(layer_cfgs)
    for lc in layer_cfgs:
        if layer_name(lc) in ops:
            continue
        m = map_layer(lc)
        mapped.append(m)
        if m.class_name == "InputLayer":
            nodes[(m.name, 0)] = b.input(_batch_shape(lc), name=_safe(m.name))
            continue
        for k, node in enumerate(lc.get("inbound_nodes", [])):
            pending.append((m, k, inbound(node, m.name, ops)))
    for m, k, refs in _call_order(pending, set(nodes)):
        nodes[(m.name, k)] = _call(b, m, [tensor(nodes, r) for r in refs], k)
    outs = [tensor(nodes, r) for r in tensor_refs(cfg.get("output_layers"), "output_layers")]
    ins = [tensor(nodes, r) for r in tensor_refs(cfg.get("input_layers"), "input_layers")]
    model = b.build(outs if len(outs) > 1 else outs[0], ins)
    return model, mapped, unique_groups([m.class_name for m in mapped])


def _install(model: Any, entries: list[tuple[Layer, str]], store: WeightStore, source: str,
             strict_file: bool) -> None:
    """Install the arrays at each ``(layer, h5 vars path)`` into ``model``, all or nothing."""
    named = dict(model.named_weights())
    key_of = {(id(lay), w): k for k, (lay, w) in named.items()}
    for k, (lay, w) in named.items():   # a Bidirectional's directions, by their own names
        if isinstance(lay, Bidirectional):
            sub, inner = lay._split(w)
            key_of[(id(sub), inner)] = k
    tensors: dict[str, Any] = {}
    problems: list[tuple[str, Any, Any]] = []
    used: set[str] = set()
    for layer, prefix in entries:
        arrays = store.vars_at(prefix)
        if arrays is None:
            problems.append((prefix, f"the weights of {type(layer).__name__} {layer.name!r}", "missing"))
            continue
        used.update(k for k in store.arrays if k.startswith(prefix + "/"))
        conv = to_rnnkit_weights(layer, arrays, prefix)
        if isinstance(conv, str):
            problems.append((prefix, f"{type(layer).__name__} {layer.name!r} weights", conv))
            continue
        for w, a in conv.items():
            if (id(layer), w) not in key_of:
                raise FileFormatError(f"{source}: layer {layer.name!r} is not on any path from the model's "
                                      f"inputs to its outputs (a Keras model holds only such layers)")
            tensors[key_of[(id(layer), w)]] = a
    if strict_file:
        for k in sorted(set(store.arrays) - used):
            problems.append((k, "no such weight in the model", f"unexpected {store.arrays[k].shape}"))
    if problems:
        listing = "; ".join(f"{n!r}: expected {e}, got {g}" for n, e, g in problems)
        err = WeightShapeError(problems[0][0], problems[0][1], problems[0][2],
                               f"{source}: {len(problems)} problem(s), nothing was loaded: {listing}; "
                               f"layer groups in the file: {sorted(store.groups_with_weights())}")
        err.problems = problems  # type: ignore[attr-defined]
        raise err
    apply_strict(named, tensors, source)


def _rebuild(top: dict[str, Any], data: BinaryIO, p: str) -> tuple[Any, list[Mapped], list[str], WeightStore]:
    """The model of a ``.keras`` archive's config, built within the allocation budget of its
    weights, with its mapped layers, their h5 groups and the weights."""
    cfg = top["config"]
    kind = top.get("class_name")
    functional = kind in ("Functional", "Model") and "input_layers" in cfg
    if kind != "Sequential" and not functional:
        raise UnsupportedFeatureError(str(cfg.get("name", kind)), "class_name",
                                      f"Keras model class {kind!r}: only Sequential and functional "
                                      f"models can be imported (subclassed models have no config)")
    layers = cfg.get("layers", [])
    if not isinstance(layers, list):
        raise FileFormatError(f"{p}: config.json's layers are {str(layers)[:200]}, expected a list")
    skip = mask_ops(layers) if functional else set()
    for lc in layers:
        if layer_name(lc) not in skip:
            map_layer(lc)  # refuse a malformed or unsupported layer before reading any weight
    store = WeightStore.read(data, f"{p}:{_WEIGHTS}")
    # the config may declare no more weight numbers than the file holds: checked per weight
    # before it is drawn, so LSTM(units=20000) in a small file costs nothing
    with allocation_budget(sum(int(a.size) for a in store.arrays.values()), f"load_keras({p})"):
        try:
            model, mapped, groups = _functional(cfg) if functional else _sequential(cfg, top)
        except RecursionError:
            raise FileFormatError(f"{p}: config.json is nested too deeply to rebuild") from None
    return model, mapped, groups, store


def load_keras(path: str | os.PathLike[str]) -> Sequential | GraphModel:
    """Rebuild the Keras 3 model saved in ``path`` (``model.save("m.keras")``) as an rnnkit model
    with the same weights: a Sequential, or a GraphModel (functional models, Bidirectional).

    Raises FileFormatError for a file that is not a ``.keras`` archive (naming what it is),
    UnsupportedFeatureError for a layer or option rnnkit cannot reproduce (see the module doc),
    WeightShapeError listing every weight that is missing or mis-shaped, MissingDependencyError
    when h5py is not installed. The result predicts what Keras' ``model.predict`` does (float32:
    within ~1e-6). A compiled Keras model comes back compiled with Keras' optimizer formula
    (see the module doc)."""
    p = os.fspath(path)
    with _read_archive(p) as (top, data):
        try:
            model, mapped, groups, store = _rebuild(top, data, p)
        except Error:
            raise
        except (KeyError, IndexError, AttributeError, ValueError, TypeError) as e:
            # a value of the wrong kind somewhere in config.json that no check above names
            raise FileFormatError(f"{p}: config.json is malformed ({type(e).__name__}: {e})"[:500]) from None
    entries: list[tuple[Layer, str]] = []
    for m, group in zip(mapped, groups, strict=True):
        g = store.by_name.get(m.name, f"layers/{group}")
        entries.extend((layer, f"{g}/{rel}") for layer, rel in m.parts)
    _install(model, entries, store, f"load_keras({p})", strict_file=False)
    compile_from_keras(model, top, f"load_keras({p})")
    return model


_KERAS_CLASS: dict[type, str] = {Dense: "Dense", Embedding: "Embedding", Bidirectional: "Bidirectional",
                                 **{v: k for k, v in RECURRENT.items()}}


def _rel(layer: Layer) -> str:
    return "cell/vars" if isinstance(layer, RecurrentLayer) else "vars"


def _entries(layer: Layer, group: str) -> list[tuple[Layer, str]]:
    """Where ``layer``'s weights lie in the Keras h5 group ``group``."""
    if isinstance(layer, Bidirectional):
        return [(layer.forward_layer, f"{group}/forward_layer/cell/vars"),
                (layer.backward_layer, f"{group}/backward_layer/cell/vars")]
    if isinstance(layer, MultiHeadAttention):   # one EinsumDense sublayer per projection
        return [(layer, f"{group}/{sub}/vars") for sub in MHA_GROUPS.values()]
    return [(layer, f"{group}/{_rel(layer)}")]


def _graph_entries(model: GraphModel, store: WeightStore) -> list[tuple[Layer, str]]:
    """Where each weighted layer of a GraphModel finds its weights in ``store``: by position
    as Keras writes and reads them (the k-th layer of a class in ``model.layers`` order,
    InputLayers included, in the group ``lstm``, ``lstm_1``, ...); when a group that order
    names holds no weights (a Keras TimeDistributed or Bidirectional has its own group), by
    the Keras layer name the file gives each group, a layer's first node's name."""
    weighted = [lay for lay in model.called_layers if lay.weight_names]
    order = model.layers
    classes = [_KERAS_CLASS.get(type(lay), type(lay).__name__) for lay in order]
    where = {id(lay): f"layers/{g}" for lay, g in zip(order, unique_groups(classes), strict=True)}
    if not all(store.vars_at(at) is not None for lay in weighted for _, at in _entries(lay, where[id(lay)])):
        groups = {_safe(k): v for k, v in store.by_name.items()}
        first: dict[int, str] = {}
        for n in model.nodes:
            if n.layer is not None and id(n.layer) not in first:
                first[id(n.layer)] = n.name
        where = {id(lay): groups.get(first[id(lay)], "layers/" + first[id(lay)]) for lay in weighted}
    entries: list[tuple[Layer, str]] = []
    for lay in weighted:
        group, rel = where[id(lay)], _entries(lay, "")[0][1].lstrip("/")
        if store.vars_at(f"{group}/{rel}") is None and store.vars_at(f"{group}/layer/{rel}") is not None:
            group = f"{group}/layer"  # a Keras TimeDistributed
        entries.extend(_entries(lay, group))
    return entries


def load_keras_weights(model: Any, path: str | os.PathLike[str]) -> None:
    """Read a Keras 3 weights file (``model.save_weights("w.weights.h5")``, or the weights of a
    ``.keras`` archive) into a built rnnkit ``model`` of the same architecture, all or nothing.

    Sequential: the k-th rnnkit layer of a class (Dense, Embedding, SimpleRNN, LSTM, GRU,
    Bidirectional) takes the weights of the k-th Keras layer of that class (Keras' groups
    ``lstm``, ``lstm_1``, ...; weightless layers do not matter; a Keras TimeDistributed needs
    the model :func:`load_keras` builds). GraphModel: the k-th layer of a class in
    ``model.layers`` (Keras' order, input layers included) takes the k-th Keras layer of that
    class, as Keras' own ``load_weights`` reads the file; where that finds no weights (a
    Keras TimeDistributed or Bidirectional), a layer whose first node is named ``N`` takes the
    Keras layer named ``N`` (the names :func:`load_keras` gives). Every array of the
    file must be used and every weight of the model found with its exact shape;
    WeightShapeError lists each problem otherwise."""
    p = os.fspath(path)
    _check_path(p)
    if zipfile.is_zipfile(p):
        with _read_archive(p) as (_, data):
            store = WeightStore.read(data, p)
    else:
        store = WeightStore.read(p, p)
    entries: list[tuple[Layer, str]] = []
    if isinstance(model, Sequential):
        classes = [_KERAS_CLASS.get(type(layer), type(layer).__name__) for layer in model.layers]
        for layer, group in zip(model.layers, unique_groups(classes), strict=True):
            if layer.weight_names:
                entries.extend(_entries(layer, f"layers/{group}"))
    elif isinstance(model, GraphModel):
        entries = _graph_entries(model, store)
    else:
        raise TypeError(f"load_keras_weights: expected a Sequential or GraphModel, got "
                        f"{type(model).__name__}")
    _install(model, entries, store, f"load_keras_weights({p})", strict_file=True)
