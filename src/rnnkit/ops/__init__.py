"""``rnnkit.ops``: Keras 3's ``keras.ops`` for the array work around rnnkit's layers, each op with
its gradient (its vector-Jacobian product, written beside its value).

Names, argument names and semantics are Keras': broadcasting (the gradient sums over the
broadcast axes), ``axis`` / ``keepdims``, and Keras' dtypes (an integer with a float gives the
float's dtype; integer inputs of float functions, ``mean`` and ``divide`` give float32; Python
numbers take the other operand's dtype; Python floats and lists of them convert to float32).
They take and return plain NumPy arrays (``np.asarray`` and ``float()`` work on every result);
while a :class:`rnnkit.GradientTape` records, each call whose input the tape tracks adds one
entry to it. Bad arguments raise :class:`rnnkit.InvalidInputError` naming the op, what it
expected and what it got.
"""

from rnnkit.ops._core import cast, convert_to_tensor
from rnnkit.ops._linalg import (
    concatenate,
    dot,
    einsum,
    expand_dims,
    matmul,
    reshape,
    split,
    squeeze,
    stack,
    take,
    take_along_axis,
    tensordot,
    transpose,
)
from rnnkit.ops._math import (
    abs,
    add,
    argmax,
    clip,
    cumsum,
    divide,
    exp,
    log,
    log_softmax,
    logsumexp,
    max,
    maximum,
    mean,
    min,
    minimum,
    multiply,
    negative,
    norm,
    one_hot,
    power,
    relu,
    sigmoid,
    softmax,
    softplus,
    sqrt,
    square,
    stop_gradient,
    subtract,
    sum,
    tanh,
    where,
)

__all__ = [
    "abs", "add", "argmax", "cast", "clip", "concatenate", "convert_to_tensor", "cumsum", "divide",
    "dot", "einsum", "exp", "expand_dims", "log", "log_softmax", "logsumexp", "matmul", "max",
    "maximum", "mean", "min", "minimum", "multiply", "negative", "norm", "one_hot", "power", "relu",
    "reshape", "sigmoid", "softmax", "softplus", "split", "sqrt", "square", "squeeze", "stack",
    "stop_gradient", "subtract", "sum", "take", "take_along_axis", "tanh", "tensordot",
    "transpose", "where",
]
