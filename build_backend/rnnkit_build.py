"""rnnkit's build backend: setuptools' own, and for an editable install (``pip install -e .``)
the compiled kernels of every configuration of the built-in cells put into Numba's on-disk cache
before the install ends, so that the first fit or ``predict`` of any of them compiles nothing.

Every hook is ``setuptools.build_meta``'s. Two are extended:

- ``get_requires_for_build_editable`` adds the package's own runtime dependencies (read from
  ``pyproject.toml``: NumPy, Numba, ...) to the build environment, so that the compilation
  below can import rnnkit there;
- ``build_editable`` builds the editable wheel with setuptools, then runs ``python -m rnnkit
  compile --cells CELLS`` on this source tree (``src`` first on ``PYTHONPATH``), in the build
  environment. The kernels go where the installed package's kernels will look for them: next to
  the sources (``src/rnnkit/kernels/__pycache__``), or the directory ``NUMBA_CACHE_DIR`` names.

Numba's cache is keyed on the kernel sources, on Numba's version and on the CPU, so a runtime
with another Numba than the build environment's (an older one kept in the environment) or
another machine (a shared checkout) simply compiles again on its first run: nothing it loads is
stale. A compilation that fails or runs past ``TIMEOUT_S`` leaves a warning in pip's output
(``pip install -v`` shows it) and never fails the install.

``RNNKIT_COMPILE_AT_INSTALL`` chooses the configurations (``rnnkit compile --cells``): ``all``
by default (SimpleRNN, LSTM, LSTM with ``proj_size``, GRU in both forms; each in float32,
float64 and int8), a comma-separated list such as ``lstm,gru``, or ``0`` for none (then the
build environment gets setuptools alone, as for a wheel). A regular (not editable) wheel is
built by setuptools alone: its installed files are new files, which a cache made here would not
match; ``rnnkit compile`` after the install fills the cache for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook not defined below is setuptools')

ROOT = Path(__file__).resolve().parents[1]
ENV = "RNNKIT_COMPILE_AT_INSTALL"
DEFAULT_CELLS = "all"
#: the longest the compilation may take before it is stopped (and the install goes on without it)
TIMEOUT_S = 900.0


def cells() -> str | None:
    """The cells to compile at an editable install (``RNNKIT_COMPILE_AT_INSTALL``), or None."""
    got = os.environ.get(ENV, DEFAULT_CELLS).strip()
    return None if got in ("", "0") else got


def runtime_requirements() -> list[str]:
    """The ``[project] dependencies`` of this tree's ``pyproject.toml``."""
    try:
        import tomllib as toml  # Python 3.11+
    except ImportError:  # pragma: no cover - Python 3.10
        from setuptools.compat.py310 import tomllib as toml  # type: ignore[no-redef]
    with open(ROOT / "pyproject.toml", "rb") as fh:
        return list(toml.load(fh)["project"]["dependencies"])


def get_requires_for_build_editable(config_settings: Any = None) -> list[str]:
    reqs = list(_setuptools.get_requires_for_build_editable(config_settings))
    return reqs + runtime_requirements() if cells() else reqs


def build_editable(wheel_directory: str, config_settings: Any = None,
                   metadata_directory: Any = None) -> str:
    name: str = _setuptools.build_editable(wheel_directory, config_settings, metadata_directory)
    todo = cells()
    if todo:
        compile_kernels(todo)
    return name


def compile_command(todo: str) -> tuple[list[str], dict[str, str]]:
    """The command that compiles the kernels of the cells ``todo``, and its environment: this
    interpreter (the build environment's, whose ``PYTHONPATH`` pip set), this tree's ``src``
    first on ``PYTHONPATH``. It runs in ``src`` (:func:`compile_kernels`), which ``-m`` puts
    first on ``sys.path`` in it and in the children it starts: pip's build environment drops
    from the path what the interpreter's own site-packages add, and an earlier editable install
    of rnnkit adds ``src`` there."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT / "src"), env.get("PYTHONPATH", "")) if p)
    return [sys.executable, "-m", "rnnkit", "compile", "--cells", todo], env


def compile_kernels(todo: str) -> bool:
    """Run :func:`compile_command`; True when it compiled. Its output and any failure go to
    stderr (pip shows them with ``-v``); nothing raises."""
    cmd, env = compile_command(todo)
    t0 = time.perf_counter()
    print(f"rnnkit: compiling the kernels of {todo} into Numba's cache (set {ENV}=0 to skip)",
          file=sys.stderr, flush=True)
    try:
        r = subprocess.run(cmd, env=env, cwd=ROOT / "src", capture_output=True, text=True, timeout=TIMEOUT_S)
    except (OSError, subprocess.SubprocessError) as e:
        why = f"{type(e).__name__}: {e}"
    else:
        sys.stderr.write(r.stdout + r.stderr)
        if r.returncode == 0:
            print(f"rnnkit: kernels compiled at install in {time.perf_counter() - t0:.1f} s",
                  file=sys.stderr, flush=True)
            return True
        lines = (r.stderr or r.stdout).strip().splitlines()
        why = f"exit status {r.returncode}: {lines[-1] if lines else 'no message'}"
    print(f"rnnkit: warning: the kernels were not compiled at install ({why}); the first run "
          "compiles them instead", file=sys.stderr, flush=True)
    return False
