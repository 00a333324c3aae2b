"""``Ctx``: everything one pass produces — the mode, the caches for backward, the gradients.

Layers hold weights only; a pass holds its state here (Equinox-style explicit state). So one
built layer serves many threads at once, each with its own ``Ctx``, and a layer called at two
places of a graph model records two caches and receives the summed gradient.

Cache discipline: ``forward`` pushes one cache per call of a layer, ``backward`` pops the most
recent one (last in, first out), which is the order a graph model's reverse walk visits them.
"""

from __future__ import annotations

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


class Ctx:
    """The state of one forward (and backward) pass.

    Create with :meth:`training` (records caches, enables dropout) or :meth:`inference`
    (records nothing). ``grads`` maps ``(layer, weight_name)`` to the summed gradient.
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
        self.grads: dict[tuple[Layer, str], np.ndarray] = {}
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
        """Add ``value`` into the gradient store at ``(layer, name)`` (sums repeated calls).

        The store keeps the array it is handed, uncopied: the caller hands it over and must not
        change or reuse it afterwards, since a later ``add_grad`` for the same weight adds into
        it in place (a read-only array is never written; the sum is then a new array)."""
        key = (layer, name)
        have = self.grads.get(key)
        if have is None:
            self.grads[key] = np.asarray(value)
        elif have.flags.writeable:
            have += value
        else:
            self.grads[key] = have + value

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
