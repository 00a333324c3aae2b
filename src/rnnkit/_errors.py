"""The error hierarchy. Every error rnnkit raises on purpose derives from :class:`Error`.

Messages say what happened, what was expected and what was given.
"""

from __future__ import annotations

from typing import Any


class Error(Exception):
    """Base class of every rnnkit error."""


class InvalidParameterError(Error, ValueError):
    """A constructor or configuration argument is out of its domain (``units=0``, ...)."""


class InvalidInputError(Error, ValueError):
    """An input tensor or shape does not fit the layer (wrong rank, width, index, ...)."""


class UnknownWeightError(InvalidInputError, KeyError):
    """A weight or gradient looked up by a name that is not there (``layer.weight("nope")``,
    ``ctx.grad(layer, "nope")``). Also a ``KeyError``, as a failed lookup is in Python."""

    __str__ = Exception.__str__  # the message as written, not KeyError's quoted repr


class NotBuiltError(Error, RuntimeError):
    """A layer was used before :meth:`build` settled its weights."""

    def __init__(self, layer: str, action: str = "forward", message: str | None = None) -> None:
        self.layer = layer
        super().__init__(message if message is not None else (
            f"{layer}: {action} needs a built layer; call build(shape) first, "
            f"or forward_mut(x, ctx), which builds from the input"
        ))


class MethodNotImplementedError(Error, NotImplementedError):
    """A method a subclass must provide was called on a class that does not (``forward`` of the
    :class:`~rnnkit.Layer` base itself, ``compute_output_shape`` of a layer without one). Also a
    ``NotImplementedError``, as Python's abstract methods raise."""


class ForwardPassNotRunError(Error, RuntimeError):
    """``backward`` was called on a context that holds no forward pass of that layer."""

    def __init__(self, layer: str, detail: str = "") -> None:
        self.layer = layer
        msg = (
            f"ForwardPassNotRun({layer!r}): backward needs a forward pass of this layer "
            f"recorded in the same training Ctx"
        )
        detail = str(detail)   # what it is shown as (an array's truth value is ambiguous)
        super().__init__(msg + (f" ({detail})" if detail else ""))


class WeightShapeError(Error, ValueError):
    """A weight array has the wrong shape (or is missing / unexpected when loading)."""

    def __init__(self, name: str, expected: Any, got: Any, detail: str = "") -> None:
        self.name = name
        self.expected = expected
        self.got = got
        msg = f"WeightShape: {name!r} expected shape {expected}, got {got}"
        detail = str(detail)
        super().__init__(msg + (f" ({detail})" if detail else ""))


class NonFiniteError(Error, FloatingPointError):
    """Training produced NaN or Inf; the message names the epoch and the layer."""


class FileFormatError(Error, ValueError):
    """A file is not what rnnkit expected: not safetensors, or without rnnkit metadata.

    The message names the path and what was found there."""


class MemoryBudgetError(InvalidParameterError, MemoryError):
    """A size given by a caller or a file (units, repeats, a batch of states, an input shape)
    would make an array larger than the memory budget (``rnnkit.io.set_limits(max_array_bytes=)``).
    Raised before anything is allocated; the message names the size, the budget and how to
    raise it. An InvalidParameterError (a size out of range) and a MemoryError."""


class ModelBusyError(Error, RuntimeError):
    """``fit`` was called on a model that is already training in another thread. Two trainings
    of one model would interleave their optimizer steps in whatever order the threads run, so
    neither result would be reproducible; train copies instead (``model_from_config``)."""


class DataSourceError(Error, RuntimeError):
    """A batch source (generator, Dataset) raised while producing a batch; the message names
    the batch and epoch, ``__cause__`` is the original exception."""


class GraphCallError(Error, AttributeError):
    """``layer.input`` / ``layer.output`` of a layer not called exactly once on graph nodes (an
    AttributeError too, so ``hasattr(layer, "output")`` says whether there is one)."""
