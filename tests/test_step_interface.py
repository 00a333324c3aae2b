"""The compiled step's declared interface (rnnkit.kernels._step.FORWARD_ARGS / BACKWARD_ARGS),
checked when a ``Step`` is made, before anything compiles: a wrong arity or a wrong name is a
typed error naming the declared signature and what was given, and the function stays uncompiled.
The walker's typing of the call (kernels._steps) takes exactly the declared arguments."""

from __future__ import annotations

import inspect
import sys
import types
from typing import Any

import pytest

import rnnkit as rk

numba = pytest.importorskip("numba")
from rnnkit.kernels import _step  # noqa: E402

FWD = _step.FORWARD_ARGS
BWD = _step.BACKWARD_ARGS


def _njit(name: str, params: tuple[str, ...] | str) -> Any:
    """A lazily compiled njit function ``name(params)`` that does nothing."""
    args = params if isinstance(params, str) else ", ".join(params)
    scope: dict[str, Any] = {}
    exec(f"def {name}({args}):\n    return None\n", scope)   # noqa: S102 - constants only
    return numba.njit(scope[name])


def test_declared_interface_is_the_documented_one() -> None:
    assert len(FWD) == 12 and len(BWD) == 17
    assert set(FWD) | set(BWD) == set(_step.ARG_TYPES)
    doc = " ".join((rk.kernels.__doc__ or "").split())
    assert _step.signature_text("forward") in doc and _step.signature_text("backward") in doc


def test_walker_typing_takes_the_declared_arguments() -> None:
    from rnnkit.kernels import _steps
    assert tuple(inspect.signature(_steps._forward_typing).parameters)[2:] == FWD
    assert tuple(inspect.signature(_steps._backward_typing).parameters)[2:] == BWD


@pytest.mark.parametrize(("which", "params", "given"), [
    ("forward", FWD[:3], "3 parameters"),                                 # arity
    ("forward", (*FWD[:-1], "options"), "options"),                       # a name
    ("backward", (*BWD, "extra"), "18 parameters"),
    ("backward", ", ".join(BWD[:-1]) + ", opts=()", "opts=()"),           # a default
    ("forward", "*args", "*args"),
])
def test_a_wrong_signature_is_refused_before_compiling(which: str, params: Any, given: str) -> None:
    bad = _njit(f"bad_{which}", params)
    good = _njit("good", BWD if which == "forward" else FWD)
    fns = {which: bad, "backward" if which == "forward" else "forward": good}
    with pytest.raises(rk.InvalidParameterError) as e:
        rk.kernels.Step(fns["forward"], fns["backward"])
    msg = str(e.value)
    assert _step.signature_text(which) in msg and given in msg and f"bad_{which}" in msg
    assert bad.signatures == [] and good.signatures == []                 # nothing compiled


def test_a_named_function_is_checked_when_imported() -> None:
    mod = types.ModuleType("rnnkit_test_bad_steps")
    mod.fwd = _njit("fwd", FWD[:-1])   # type: ignore[attr-defined]
    mod.bwd = _njit("bwd", BWD)        # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    try:
        step = rk.kernels.Step(f"{mod.__name__}:fwd", f"{mod.__name__}:bwd")   # (not imported yet)
        with pytest.raises(rk.InvalidParameterError, match=r"forward\(k, a, rec.*11 parameters"):
            step.functions()
        assert mod.fwd.signatures == []   # type: ignore[attr-defined]
    finally:
        del sys.modules[mod.__name__]
    with pytest.raises(rk.InvalidParameterError, match="'module:attribute'"):
        rk.kernels.Step("no_colon", f"{mod.__name__}:bwd")


def test_the_builtin_steps_declare_the_interface() -> None:
    for cell in (rk.SimpleRNNCell(2), rk.LSTMCell(2), rk.GRUCell(2), rk.GRUResetAfterCell(2)):
        step = type(cell).compiled_step
        assert step is not None
        fwd, bwd = step.functions()       # checks them
        assert tuple(inspect.signature(fwd.py_func).parameters) == FWD
