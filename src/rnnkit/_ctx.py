"""``Ctx``: everything one pass produces — the mode, the caches for backward, the gradients.

Layers hold weights only; a pass holds its state here (Equinox-style explicit state). So one
built layer serves many threads at once, each with its own ``Ctx``, and a layer called at two
places of a graph model records two caches and receives the summed gradient.

Cache discipline: ``forward`` pushes one cache per call of a layer, ``backward`` pops the most
recent one (last in, first out), which is the order a graph model's reverse walk visits them.

Gradient storage (:class:`GradStore`): every stored gradient is an array the store allocated
itself and hands to nobody to write: the first gradient of a weight is COPIED into a fresh
C-contiguous array (or written by the caller into a zeroed array the store made and keeps,
:meth:`Ctx.add_grad_from`), and every later one is added into that array. So a gradient is never a
view of another weight's gradient (two PyTorch biases that receive one rnnkit bias row's
gradient), of a weight, or of a buffer that a later pass, a collective or an optimizer
overwrites, whatever the caller hands in, and summing passes in one ``Ctx`` is always right.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, MutableMapping
from typing import Any, Protocol

import numpy as np

from rnnkit._errors import ForwardPassNotRunError, InvalidInputError, UnknownWeightError
from rnnkit._mask import Mask

_NO_LAYERS: frozenset[int] = frozenset()


class Layer(Protocol):
    """What a ``Ctx`` reads of a layer: its name, for messages (caches and gradients are keyed
    by the layer object itself). :class:`rnnkit.Layer` is one; it is not imported here because
    its module imports this one."""

    @property
    def name(self) -> str: ...


GradKey = tuple[Layer, str]


def _owned(value: Any) -> np.ndarray:
    """A fresh writable C-contiguous copy of ``value`` in its own dtype (memory nobody else
    holds)."""
    return np.array(value, copy=True, order="C", subok=False)


def _add_into(have: np.ndarray, value: Any, key: GradKey) -> None:
    """``have += value`` for two gradients of one weight; InvalidInputError when their shapes
    differ (nothing is broadcast)."""
    v = np.asarray(value)
    if v.shape != have.shape:
        raise InvalidInputError(
            f"gradient of {key[0].name}.{key[1]}: expected the shape of the gradient already "
            f"summed, {have.shape}, got {v.shape}")
    np.add(have, v, out=have, casting="same_kind")


class GradStore(MutableMapping[GradKey, np.ndarray]):
    """``(layer, weight_name)`` -> the summed gradient, each in storage of its own.

    Writing a key (``store[key] = g``, :meth:`add`) copies ``g`` into a fresh array the store
    owns; :meth:`add` adds into that array afterwards (in place: a reader holding the array sees
    the sum). Reading hands out the stored array itself, no copy (the optimizer reads it as it
    is); writing it in place and assigning it back (``store[key] *= s``) keeps it, as the same
    array. :meth:`move` re-keys a stored array without copying it (it never leaves the store).
    """

    __slots__ = ("_arrays",)

    def __init__(self) -> None:
        self._arrays: dict[GradKey, np.ndarray] = {}

    def __getitem__(self, key: GradKey) -> np.ndarray:
        return self._arrays[key]

    def __setitem__(self, key: GradKey, value: Any) -> None:
        if value is not self._arrays.get(key):   # (the stored array itself, updated in place)
            self._arrays[key] = _owned(value)

    def __delitem__(self, key: GradKey) -> None:
        del self._arrays[key]

    def __iter__(self) -> Iterator[GradKey]:
        return iter(self._arrays)

    def __len__(self) -> int:
        return len(self._arrays)

    def __contains__(self, key: object) -> bool:
        return key in self._arrays

    def clear(self) -> None:
        self._arrays.clear()

    def add(self, key: GradKey, value: Any) -> None:
        """Sum ``value`` into ``key``'s gradient: the first value is copied into a fresh array,
        later ones are added into it. ``value`` is only read (the caller may reuse it)."""
        have = self._arrays.get(key)
        if have is None:
            self._arrays[key] = _owned(value)
        else:
            _add_into(have, value, key)

    def add_from(self, key: GradKey, shape: tuple[int, ...], dtype: Any,
                 write: Callable[[np.ndarray], None]) -> None:
        """Sum into ``key``'s gradient what ``write(out)`` adds into ``out``, a zeroed array of
        ``shape`` and ``dtype`` that the store allocates (and keeps, for the first gradient of
        the key: no copy) -- ``write`` must not keep ``out``. The same sums as :meth:`add` of
        that array."""
        have = self._arrays.get(key)
        out = np.zeros(shape, dtype)
        write(out)
        if have is None:
            self._arrays[key] = out
        else:
            _add_into(have, out, key)

    def give(self, key: GradKey, value: np.ndarray, fortran: bool = False) -> None:
        """:meth:`add` of an array the caller gives up (made for this gradient, held by nobody
        else, written by nobody afterwards): the first gradient of the key is kept as it is,
        without a copy, when it is a writable C-contiguous ndarray -- or, with ``fortran``, a
        Fortran-contiguous one (the gradient of a weight stored in Fortran order, such as an
        ``rnnkit.rnn`` net's matrix: the optimizer's rule then runs in one memory order); later
        ones are added in."""
        have = self._arrays.get(key)
        if have is None:
            f = value.flags
            self._arrays[key] = value if type(value) is np.ndarray and f.writeable and (
                f.c_contiguous or fortran and f.f_contiguous) else _owned(value)
        else:
            _add_into(have, value, key)

    def move(self, key: GradKey, to: GradKey) -> bool:
        """Remove ``key``'s gradient and sum it into ``to``'s (taking the array over when ``to``
        has none yet); False, and nothing changes, when ``key`` has no gradient."""
        arr = self._arrays.pop(key, None)
        if arr is None:
            return False
        have = self._arrays.get(to)
        if have is None:
            self._arrays[to] = arr
        else:
            _add_into(have, arr, to)
        return True

    def __repr__(self) -> str:
        return f"GradStore({', '.join(f'{lay.name}.{n}' for lay, n in self._arrays)})"


class Ctx:
    """The state of one forward (and backward) pass.

    Create with :meth:`training` (records caches, enables dropout) or :meth:`inference`
    (records nothing). ``grads`` (a :class:`GradStore`) maps ``(layer, weight_name)`` to the
    summed gradient, each in storage of its own.
    """

    __slots__ = ("training_mode", "grads", "penalties", "_caches", "_seed", "_rng", "_mask", "_no_input_grad")

    def __init__(self, training: bool, seed: int | None = None) -> None:
        if training is not True and training is not False:   # (the quick test first)
            if not isinstance(training, np.bool_):
                raise TypeError(f"Ctx: training must be a bool (or use Ctx.training(seed) / "
                                f"Ctx.inference()), got {training!r}")
            training = bool(training)
        self._mask: Mask | None = None
        self.training_mode: bool = training
        self.grads: GradStore = GradStore()
        self._caches: dict[int, list[tuple[Layer, Any]]] = {}
        #: the activity-regularizer penalties of the passes run in this context, in order
        self.penalties: list[float] = []
        self._seed = seed
        self._rng: np.random.Generator | None = None   # made on first use (costs ~13 us)
        self._no_input_grad: frozenset[int] = _NO_LAYERS   # ids of the layers

    @property
    def seed(self) -> int | None:
        """The seed the context was made with (None: entropy)."""
        return self._seed

    @property
    def rng(self) -> np.random.Generator:
        """Generator for pass randomness (dropout masks); seeded for reproducible passes."""
        if self._rng is None:
            self._rng = np.random.default_rng(self._seed)
        return self._rng

    @classmethod
    def training(cls, seed: int | None = None) -> Ctx:
        """A context that records caches for ``backward`` and turns dropout on."""
        return cls(True, seed)

    @classmethod
    def inference(cls) -> Ctx:
        """A context that records nothing; ``backward`` is impossible after it."""
        return cls(False)

    @property
    def is_training(self) -> bool:
        return self.training_mode

    @property
    def drops(self) -> bool:
        """Whether the passes run in this context apply dropout: a training context does (a
        gradient tape's context for a call with ``training=False`` records caches and drops
        nothing)."""
        return self.training_mode

    # -- the mask of the sequence being passed ------------------------------------------------
    @property
    def mask(self) -> Mask | None:
        """The :class:`~rnnkit.Mask` that the next ``forward`` of a layer reads (None: every step
        is real). A layer that consumes it keeps it in its cache for ``backward``."""
        return self._mask

    def set_mask(self, mask: Any = None, *, lengths: Any = None) -> Ctx:
        """Set :attr:`mask` for the passes that follow: a ``Mask``, a boolean (B, T) array
        (Keras' masking), ``lengths=`` (PyTorch's packed semantics), or None to clear it.
        Returns the context (chainable): ``layer.forward(x, ctx.set_mask(lengths=n))``."""
        if lengths is None and (mask is None or isinstance(mask, Mask)):
            self._mask = mask
            return self
        self._mask = Mask(lengths=lengths) if lengths is not None else Mask.of(mask)
        if lengths is not None and mask is not None:
            raise InvalidInputError("Ctx.set_mask: give a mask or lengths, not both")
        return self

    # -- caches ------------------------------------------------------------------------------
    def save(self, layer: Layer, cache: Any) -> None:
        """Push the cache of one forward call of ``layer`` (only in a training context)."""
        if self.training_mode:
            self._caches.setdefault(id(layer), []).append((layer, cache))

    def peek(self, layer: Layer) -> Any:
        """The most recent cache of ``layer``, left in place (so a backward can check its
        upstream gradient before consuming the cache); ForwardPassNotRunError if none."""
        stack = self._caches.get(id(layer))
        if not stack:
            self.load(layer)  # raises with the right message
        assert stack
        return stack[-1][1]

    def load(self, layer: Layer) -> Any:
        """Pop the most recent cache of ``layer``; raise ForwardPassNotRunError if none."""
        stack = self._caches.get(id(layer))
        if not stack:
            detail = (
                "this is an inference Ctx, which records nothing"
                if not self.training_mode
                else "no unconsumed forward pass of this layer in the Ctx"
            )
            raise ForwardPassNotRunError(layer.name, detail)
        _, cache = stack.pop()
        if not stack:
            del self._caches[id(layer)]
        return cache

    def clear(self) -> None:
        """Drop every cache and gradient (the mode stays)."""
        self._caches.clear()
        self.grads.clear()
        self.penalties.clear()

    # -- gradients ---------------------------------------------------------------------------
    def skip_input_grad(self, *layers: Layer) -> None:
        """Say that nobody reads the input gradient of ``layers`` in this context (the trainer
        says it of a model's first layer): their ``backward`` adds the weights' gradients as
        always and computes no dL/dx, returning None in its place."""
        self._no_input_grad = self._no_input_grad.union(map(id, layers))

    def needs_input_grad(self, layer: Layer) -> bool:
        """Whether ``layer``'s backward must compute dL/dx (True unless :meth:`skip_input_grad`
        named it)."""
        return id(layer) not in self._no_input_grad

    def add_grad(self, layer: Layer, name: str, value: np.ndarray) -> None:
        """Add ``value`` into the gradient of ``layer``'s weight ``name`` (sums repeated calls).

        ``value`` is only read: the first gradient of a weight is copied into an array the
        Ctx owns, later ones are added into it (:class:`GradStore`), so the caller may hand over
        a view, a weight or a scratch buffer and reuse it afterwards."""
        self.grads.add((layer, name), value)

    def give_grad(self, layer: Layer, name: str, value: np.ndarray, *, fortran: bool = False) -> None:
        """:meth:`add_grad` of an array the caller made for this gradient and gives up (nobody
        else holds or writes it afterwards): the first gradient of a weight is kept without a
        copy (:meth:`GradStore.give`; ``fortran``: a Fortran-ordered one too, for a weight
        stored in that order)."""
        self.grads.give((layer, name), value, fortran)

    def add_grad_from(self, layer: Layer, name: str, shape: tuple[int, ...], dtype: Any,
                      write: Callable[[np.ndarray], None]) -> None:
        """Add into the gradient of ``layer``'s weight ``name`` what ``write(out)`` adds into
        ``out``, a zeroed array of ``shape`` and ``dtype`` the Ctx allocates and owns (so a
        gradient built by scattering, such as an Embedding's, is not copied); ``write`` must
        not keep ``out``."""
        self.grads.add_from((layer, name), shape, dtype, write)

    def move_grad(self, layer: Layer, name: str, to: Layer, to_name: str) -> bool:
        """Re-key the gradient of ``layer.name`` as ``to.to_name`` (summed into one already
        there), without a copy; False when ``layer.name`` has none (a wrapper collecting its
        parts' gradients under its own names)."""
        return self.grads.move((layer, name), (to, to_name))

    def grad(self, layer: Layer, name: str) -> np.ndarray:
        """The summed gradient of ``layer``'s weight ``name``; UnknownWeightError (a KeyError)
        names what is stored."""
        try:
            return self.grads[(layer, name)]
        except KeyError:
            have = sorted(f"{lay.name}.{n}" for lay, n in self.grads)
            raise UnknownWeightError(
                f"no gradient for {layer.name}.{name} in this Ctx; it holds {have or 'none'}"
            ) from None

    def __repr__(self) -> str:
        mode = "training" if self.training_mode else "inference"
        return f"Ctx.{mode}(caches={sum(len(s) for s in self._caches.values())}, grads={len(self.grads)})"
