"""Numba's on-disk cache of the kernels is keyed on every source of their package: editing a
helper in one module recompiles a cached function of another module that inlines it (Numba alone
keys a function's cache on its own file only, and would load the stale machine code)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
