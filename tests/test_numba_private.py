"""Numba's (and llvmlite's) non-public internals: used only through rnnkit.kernels._numba_private,
and each use checked here, one test per use, so that a Numba release that renames or changes one
fails with its name (and what to do), not deep inside a compile."""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numba")
from rnnkit.kernels import _numba_private  # noqa: E402

SRC = Path(__file__).resolve().parents[1] / "src" / "rnnkit"
USES = [(mod, name, params) for mod, names in _numba_private.USES.items() for name, params in names.items()]


def _resolve(mod: str, dotted: str) -> Any:
    obj: Any = importlib.import_module(mod)
    for part in dotted.split("."):
        if part == "_py_file":   # an instance attribute: on a locator made for this file
            obj = obj(_locator_target, __file__)
        if part == "_index_path":   # an instance attribute: on a cache file made here
            obj = obj(cache_path=str(SRC), filename_base="f", source_stamp=None)
        obj = getattr(obj, part)
    return obj


def _locator_target() -> None:
    """The function a cache locator is made for above."""


def test_only_numba_private_imports_numba_internals() -> None:
    """No module of rnnkit but _numba_private imports numba.core or llvmlite."""
    pat = re.compile(r"^\s*(from|import)\s+(numba\.core|llvmlite)\b", re.M)
    found = [str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
             if p.name != "_numba_private.py" and pat.search(p.read_text())]
    assert found == [], f"these modules import Numba's internals directly: {found}; import them from " \
                        f"rnnkit.kernels._numba_private (and list the use in its USES)"


@pytest.mark.parametrize(("mod", "name", "params"), USES, ids=[f"{m}.{n}" for m, n, _ in USES])
def test_each_use_is_what_rnnkit_expects(mod: str, name: str, params: tuple[str, ...] | None) -> None:
    import numba
    fix = (f"numba {numba.__version__} changed {mod}.{name}, which rnnkit uses: adapt "
           f"src/rnnkit/kernels/_numba_private.py (and its users), or keep numba within the bound in "
           f"pyproject.toml")
    try:
        obj = _resolve(mod, name)
    except AttributeError as e:
        pytest.fail(f"{fix} (it is gone: {e})")
    if params is None:
        return
    assert callable(obj), f"{fix} (no longer callable: {obj!r})"
    got = tuple(inspect.signature(obj).parameters)
    assert got[:len(params)] == params, f"{fix} (parameters {got}, rnnkit passes {params})"


def test_the_event_kinds_rnnkit_listens_to_exist() -> None:
    kinds = _resolve("numba.core.event", "_builtin_kinds")
    assert {"numba:compile", "numba:compiler_lock"} <= set(kinds), kinds


def test_the_locked_cache_file_is_installed() -> None:
    from rnnkit.kernels import _cache
    assert _numba_private.caching.IndexDataCacheFile is _cache.LockedIndexDataCacheFile


def test_the_keyed_cache_locators_are_installed() -> None:
    from rnnkit.kernels import _cache
    known = _numba_private.caching.CacheImpl._locator_classes
    assert isinstance(known, list) and issubclass(known[0], _cache._SourcesKeyed), known
