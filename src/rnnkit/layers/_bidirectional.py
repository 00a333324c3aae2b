"""``Bidirectional``: a recurrent layer read both ways, the two results merged (Keras')."""

from __future__ import annotations

from typing import Any

import numpy as np

from rnnkit._ctx import Ctx
from rnnkit._errors import InvalidInputError, InvalidParameterError, NotBuiltError, UnknownWeightError
from rnnkit._layer import Layer, WeightEntry
from rnnkit._mask import Mask
from rnnkit._shape import Shape
from rnnkit._weight_decl import WeightDecl
from rnnkit.kernels._threads import pairs_pay, run_each
from rnnkit.layers._registry import layer_from_config, layer_to_config
from rnnkit.recurrent import RecurrentLayer

MERGE_MODES = ("concat", "sum", "mul", "ave", None)


class Bidirectional(Layer):
    """``Bidirectional(layer, merge_mode="concat", backward_layer=None, *, name=None)``.

    ``layer`` (a SimpleRNN / LSTM / GRU / RecurrentLayer) reads the sequence forwards; the
    backward branch is ``backward_layer`` or, by default, a copy of ``layer``'s configuration
    with ``go_backwards`` flipped and its own weights (drawn from ``seed + 1`` when ``layer``
    has a seed). The backward output is put back into input order, so step ``t`` of both
    branches describes input step ``t``; with a padded batch (``ctx.mask``) each sequence is
    reversed within its own length, so the backward branch never starts on the padding and
    every sequence gets exactly its unpadded result. Under ``return_sequences`` the padded steps
    of both branches are 0 (Keras forces ``zero_output_for_mask`` there).

    ``merge_mode``: ``"concat"`` (features side by side: forward then backward), ``"sum"``,
    ``"mul"``, ``"ave"``, or ``None`` (``forward`` returns the list ``[forward, backward]``;
    in a graph model the node has two outputs, ``node[0]`` / ``node[1]``).

    States (Keras' order): with ``return_state`` (set on ``layer``) the result is
    ``[output(s), *forward_final_state, *backward_final_state]``; an input list
    ``[x, *forward_initial_state, *backward_initial_state]`` starts both directions from given
    states. Gradients flow through both.

    Weights: ``forward.<name>`` and ``backward.<name>`` (e.g. ``forward.kernel``), the two
    layers' weights. The output mask is the input's under ``return_sequences``, else none.
    """

    supports_masking = True

    def __init__(self, layer: Any, merge_mode: str | None = "concat", backward_layer: Any = None, *,
                 name: str | None = None) -> None:
        if isinstance(layer, dict):   # from a model file
            layer = layer_from_config(layer)
        if isinstance(backward_layer, dict):
            backward_layer = layer_from_config(backward_layer)
        if not isinstance(layer, RecurrentLayer):
            raise TypeError(f"Bidirectional: layer must be a recurrent layer (SimpleRNN, LSTM, GRU, "
                            f"RecurrentLayer), got {type(layer).__name__}")
        super().__init__(seed=layer.seed, dtype=layer.dtype, name=name or "Bidirectional")
        if merge_mode not in MERGE_MODES:
            raise InvalidParameterError(f"{self.name}: merge_mode must be one of {MERGE_MODES}, got "
                                        f"{merge_mode!r}")
        self.merge_mode = merge_mode
        if backward_layer is None:   # a copy by the registry: the config names the class it fits
            entry = layer_to_config(layer)
            entry["config"].update(go_backwards=not layer.go_backwards, name=f"backward_{layer.name}",
                                   seed=None if layer.seed is None else layer.seed + 1)
            backward_layer = layer_from_config(entry)
        if not isinstance(backward_layer, RecurrentLayer):
            raise TypeError(f"{self.name}: backward_layer must be a recurrent layer, got "
                            f"{type(backward_layer).__name__}")
        for attr in ("return_sequences", "return_state", "stateful"):
            if getattr(layer, attr) != getattr(backward_layer, attr):
                raise InvalidParameterError(f"{self.name}: the forward and backward layers must agree "
                                            f"on {attr}")
        if layer.go_backwards == backward_layer.go_backwards:
            raise InvalidParameterError(f"{self.name}: backward_layer must read the other way "
                                        f"(go_backwards={not layer.go_backwards})")
        if backward_layer.dtype != layer.dtype:
            raise InvalidParameterError(f"{self.name}: both layers must have one dtype")
        self.forward_layer = layer
        self.backward_layer = backward_layer
        self.return_sequences = bool(layer.return_sequences)
        self.return_state = bool(layer.return_state)
        self.stateful = bool(layer.stateful)

    def _n_states(self) -> tuple[int, int]:
        return len(self.forward_layer.cell.state_names), len(self.backward_layer.cell.state_names)

    @property
    def _parts(self) -> tuple[tuple[str, Any], tuple[str, Any]]:
        return (("forward", self.forward_layer), ("backward", self.backward_layer))

    # -- build and shapes ----------------------------------------------------------------------
    def build(self, shape: Shape | tuple[int | None, ...]) -> None:
        shp = Shape.of(shape)
        for _, sub in self._parts:
            sub.build(shp)
        if self._input_shape is None:
            self._input_shape = shp

    def compute_output_shape(self, shape: Shape | tuple[int | None, ...]) -> Any:
        def first(s: Any) -> Shape:   # a recurrent layer with return_state lists its state shapes too
            return s[0] if isinstance(s, list) else s

        one = first(self.forward_layer.compute_output_shape(shape))
        main: list[Shape]
        if self.merge_mode is None:
            main = [one, first(self.backward_layer.compute_output_shape(shape))]
        elif self.merge_mode == "concat":
            width: Any = one[-1]
            main = [Shape((*one[:-1], int(width) + self.backward_layer.output_size))]
        else:
            main = [one]
        if self.return_state:
            return main + [Shape((None, n)) for sub in (self.forward_layer, self.backward_layer)
                           for n in sub.cell.state_sizes()]
        return main if len(main) > 1 else main[0]

    def compute_mask(self, x: Any, mask: Any) -> Any:
        out = mask if self.return_sequences else None
        main = [out, out] if self.merge_mode is None else [out]
        if self.return_state:
            return main + [None] * sum(self._n_states())
        return main if len(main) > 1 else main[0]

    # -- weights (the two layers', under "forward." / "backward.") ------------------------------
    def _split(self, name: str) -> tuple[Any, str]:
        role, _, inner = name.partition(".")
        for r, sub in self._parts:
            if r == role and inner in sub.weight_names:
                return sub, inner
        raise UnknownWeightError(f"{self.name} has no weight {name!r}; it has {self.weight_names}")

    @property
    def weight_names(self) -> list[str]:
        return [f"{r}.{n}" for r, sub in self._parts for n in sub.weight_names]

    @property
    def trainable_names(self) -> list[str]:
        return [f"{r}.{n}" for r, sub in self._parts for n in sub.trainable_names]

    def weights(self) -> list[WeightEntry]:
        return [WeightEntry(f"{r}.{e.name}", e.value) for r, sub in self._parts for e in sub.weights()]

    def _copy_weights(self) -> list[np.ndarray]:   # (get_weights: both directions, one step's)
        return [np.array(e.value) for e in self.weights()]

    def weight(self, name: str) -> np.ndarray:
        if not self.built:
            raise NotBuiltError(self.name, "weight")
        sub, inner = self._split(name)
        return sub.weight(inner)  # type: ignore[no-any-return]

    def declaration(self, name: str) -> WeightDecl:
        """The declaration of ``name`` (``"forward.kernel"``, ...) in the direction that holds it."""
        if not self.built:
            raise NotBuiltError(self.name, "declaration")
        sub, inner = self._split(name)
        decl: WeightDecl = sub.declaration(inner)
        return decl

    def from_keras_weight(self, name: str, value: Any) -> Any:
        """Keras' spelling of ``name`` (``"forward.bias"``, ...) as the direction holding it
        takes it (:meth:`rnnkit.Layer.from_keras_weight`)."""
        sub, inner = self._split(name)
        return sub.from_keras_weight(inner, value)

    def set_weight(self, name: str, value: Any, *, check_finite: bool = True) -> None:
        sub, inner = self._split(name)
        sub.set_weight(inner, value, check_finite=check_finite)

    def param_count(self) -> int:
        return int(sum(sub.param_count() for _, sub in self._parts))

    def reset_state(self) -> None:
        """Forget the carried state of both directions (stateful layers)."""
        for _, sub in self._parts:
            sub.reset_state()

    def reset_states(self) -> None:
        """Keras' spelling of :meth:`reset_state`."""
        self.reset_state()

    # -- passes ---------------------------------------------------------------------------------
    def _align(self, y: np.ndarray, mask: Mask | None) -> np.ndarray:
        """The backward branch's sequence in input order (an involution)."""
        return np.ascontiguousarray(y[:, ::-1]) if mask is None else mask.reverse_time(y)

    def forward(self, x: Any, ctx: Ctx) -> Any:
        """Both directions on ``x`` (B, T, F) under ``ctx.mask``; the merged output. ``x`` may be
        a list ``[x, *forward_state, *backward_state]`` (Keras' ``initial_state``). With
        ``return_state`` the result is ``[output(s), *forward_final, *backward_final]``."""
        self._require_built()
        nf, nb = self._n_states()
        init_f: list[Any] = []
        init_b: list[Any] = []
        if isinstance(x, (list, tuple)):
            if len(x) != 1 + nf + nb:
                raise InvalidInputError(f"{self.name}: expected an input or [x, *forward_state, "
                                        f"*backward_state] ({1 + nf + nb} arrays), got a list of {len(x)}")
            x, init_f, init_b = x[0], list(x[1:1 + nf]), list(x[1 + nf:])
        mask = ctx.mask
        xf, xb = ([x, *init_f] if init_f else x), ([x, *init_b] if init_b else x)
        passes = (lambda: self.forward_layer.forward(xf, ctx),
                  lambda: self.backward_layer.forward(xb, ctx.set_mask(mask)))
        if not ctx.training_mode and isinstance(x, np.ndarray) and x.ndim == 3 and pairs_pay(
                x.shape[0], x.shape[0] * x.shape[1] * self.forward_layer.param_count()):
            # inference: the two directions side by side, one per thread (the same values: each
            # direction's rows are computed as they would be alone; nothing is drawn at random)
            yf, yb = run_each(passes)
        else:
            yf, yb = passes[0](), passes[1]()
        sf: list[np.ndarray] = []
        sb: list[np.ndarray] = []
        if self.return_state:
            yf, *sf = yf
            yb, *sb = yb
        out = self._merge(yf, yb, mask, ctx, bool(init_f))
        if self.return_state:
            return [*(out if isinstance(out, list) else [out]), *sf, *sb]
        return out

    def _merge(self, yf: np.ndarray, yb: np.ndarray, mask: Mask | None, ctx: Ctx, given: bool) -> Any:
        valid = None
        if self.return_sequences:
            yb = self._align(yb, mask)
            if mask is not None:   # Keras: zero_output_for_mask in both branches
                valid = mask.valid(yf.shape[1])[:, :, None].astype(yf.dtype)
                yf, yb = yf * valid, yb * valid
        ctx.save(self, (mask, valid, yf if self.merge_mode == "mul" else None,
                        yb if self.merge_mode == "mul" else None, yf.shape, yb.shape, given))
        if self.merge_mode is None:
            return [yf, yb]
        if self.merge_mode == "concat":
            return np.concatenate([yf, yb], axis=-1)
        if self.merge_mode == "sum":
            return yf + yb
        if self.merge_mode == "ave":
            return (yf + yb) / self.dtype.type(2.0)
        return yf * yb

    def backward(self, grad: Any, ctx: Ctx) -> Any:
        """Gradients of both layers (stored as ``forward.*`` / ``backward.*``); returns dL/dx,
        or ``[dx, *d_forward_state, *d_backward_state]`` after an initial state. With
        ``return_state`` ``grad`` is a list like the output (None entries: zero)."""
        mask, valid, yf, yb, fshape, bshape, given = ctx.peek(self)
        nf, nb = self._n_states()
        g_sf: list[Any] = []
        g_sb: list[Any] = []
        if self.return_state:
            n_main = 2 if self.merge_mode is None else 1
            if not isinstance(grad, (list, tuple)) or len(grad) != n_main + nf + nb:
                raise InvalidInputError(f"{self.name}: with return_state, backward expects a list of "
                                        f"{n_main + nf + nb} gradients like the output, got "
                                        f"{type(grad).__name__}")
            g_sf, g_sb = list(grad[n_main:n_main + nf]), list(grad[n_main + nf:])
            grad = list(grad[:n_main]) if n_main == 2 else grad[0]
            if grad is None:
                w = fshape[-1] + bshape[-1] if self.merge_mode == "concat" else fshape[-1]
                grad = np.zeros((*fshape[:-1], w), self.dtype)
        if self.merge_mode is None:
            if not isinstance(grad, (list, tuple)) or len(grad) != 2:
                raise InvalidInputError(f"{self.name}: merge_mode=None takes backward([d_forward, "
                                        f"d_backward]), got {type(grad).__name__}")
            gf = np.zeros(fshape, self.dtype) if grad[0] is None else self._as_grad(grad[0], fshape)
            gb = np.zeros(bshape, self.dtype) if grad[1] is None else self._as_grad(grad[1], bshape)
        elif self.merge_mode == "concat":
            g = self._as_grad(grad, (*fshape[:-1], fshape[-1] + bshape[-1]))
            gf, gb = g[..., :fshape[-1]], g[..., fshape[-1]:]
        else:
            g = self._as_grad(grad, fshape)
            if self.merge_mode == "sum":
                gf, gb = g, g
            elif self.merge_mode == "ave":
                gf = gb = g / self.dtype.type(2.0)
            else:
                gf, gb = g * yb, g * yf
        ctx.load(self)  # consumed only once the gradient fits
        if valid is not None:
            gf, gb = gf * valid, gb * valid
        if self.return_sequences:
            gb = self._align(gb, mask)
        gb, gf = np.ascontiguousarray(gb), np.ascontiguousarray(gf)
        out_b = self.backward_layer.backward([gb, *g_sb] if self.return_state else gb, ctx)
        out_f = self.forward_layer.backward([gf, *g_sf] if self.return_state else gf, ctx)
        for role, sub in self._parts:   # the layers' gradients, under this layer's names
            for n in sub.trainable_names:
                ctx.move_grad(sub, n, self, f"{role}.{n}")
        if given:
            return [out_f[0] + out_b[0], *out_f[1:], *out_b[1:]]
        return out_f + out_b

    # -- configuration --------------------------------------------------------------------------
    def get_config(self) -> dict[str, Any]:
        return {"layer": layer_to_config(self.forward_layer), "merge_mode": self.merge_mode,
                "backward_layer": layer_to_config(self.backward_layer), "name": self.name}
