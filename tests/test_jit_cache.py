"""Numba's on-disk cache of the kernels is keyed on every source of their package: editing a
helper in one module recompiles a cached function of another module that inlines it (Numba alone
keys a function's cache on its own file only, and would load the stale machine code)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("numba")

SRC = Path(__file__).resolve().parents[1] / "src"

HELPER = """import numba


@numba.njit
def helper(x):
    return x + {add}
"""
USER = """import numba

from keyedpkg.helpers import helper


@numba.njit(cache=True)
def f(x):
    return 2.0 * helper(x)
"""
RUN = """import sys
from rnnkit.kernels import _cache

if sys.argv[1] == "keyed":
    _cache.key_cache_on_sources(sys.argv[2])
from keyedpkg.user import f

print(f(1.0), sum(f.stats.cache_hits.values()))
"""


def _run(root: Path, env: dict[str, str]) -> tuple[float, int]:
    out = subprocess.run([sys.executable, "-c", RUN, "keyed", str(root / "keyedpkg")], env=env,
                         capture_output=True, text=True, timeout=300, check=True).stdout.split()
    return float(out[0]), int(out[1])


@pytest.mark.parametrize("where", ["in-tree", "NUMBA_CACHE_DIR"])
def test_editing_another_source_of_the_package_recompiles(tmp_path: Path, where: str) -> None:
    pkg = tmp_path / "keyedpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "helpers.py").write_text(HELPER.format(add=1.0))
    (pkg / "user.py").write_text(USER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(tmp_path)])}
    if where == "NUMBA_CACHE_DIR":
        env["NUMBA_CACHE_DIR"] = str(tmp_path / "cache")
    else:
        env.pop("NUMBA_CACHE_DIR", None)
    assert _run(tmp_path, env) == (4.0, 0)       # compiled: 2 * (1 + 1)
    assert _run(tmp_path, env) == (4.0, 1)       # loaded from the cache
    (pkg / "helpers.py").write_text(HELPER.format(add=10.0))   # user.py itself is unchanged
    assert _run(tmp_path, env) == (22.0, 0)      # recompiled: 2 * (1 + 10), not the stale 4.0
    assert _run(tmp_path, env) == (22.0, 1)


def test_the_kernels_package_is_keyed() -> None:
    from rnnkit.kernels import _cache, _jit  # importing _jit keys its own directory

    kernels_dir = os.path.realpath(os.path.dirname(_jit.__file__))
    assert _cache._KEYED[kernels_dir] == _cache.sources_hash(kernels_dir)
    files = sorted(p.name for p in Path(kernels_dir).glob("*.py"))
    assert {"_jit.py", "_lstm.py", "_gru.py", "_simple.py", "_packed.py"} <= set(files)


def _interleaved_saves(cls: type, where: Path) -> Any:
    """Two savers of one function's cache file (as two processes compiling two versions of it
    at once): the first reads the index, then the second saves while the first would still
    write (unless the first holds a lock: then the second waits for it, at most 2 s here), then
    the first writes. Returns a fresh reader of the cache file."""
    first, second = (cls(cache_path=str(where), filename_base="f-1.py311", source_stamp="stamp")
                     for _ in range(2))
    read, second_done = threading.Event(), threading.Event()
    load = first._load_index

    def load_then_pause() -> Any:
        index = load()
        read.set()
        second_done.wait(2.0)
        return index

    first._load_index = load_then_pause
    t = threading.Thread(target=first.save, args=("version a", "code of a"))
    t.start()
    assert read.wait(60)

    def save_second() -> None:
        second.save("version b", "code of b")
        second_done.set()

    u = threading.Thread(target=save_second)
    u.start()
    t.join()
    u.join()
    return cls(cache_path=str(where), filename_base="f-1.py311", source_stamp="stamp")


def test_two_savers_of_one_function_at_once_keep_both_versions(tmp_path: Path) -> None:
    """Numba's own save reads a function's index, adds its entry and writes the index back: of
    two processes saving at once one entry is lost, and the other's data file overwritten. The
    kernels' cache file holds a lock over the whole save: both versions stay, each with its code."""
    from rnnkit.kernels import _cache, _jit

    assert isinstance(_jit.tanh32._cache._cache_file, _cache.LockedIndexDataCacheFile)  # every kernel's
    reader = _interleaved_saves(_cache.LockedIndexDataCacheFile, tmp_path)
    assert reader.load("version a") == "code of a"
    assert reader.load("version b") == "code of b"
