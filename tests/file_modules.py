"""A script of the repository that is not part of the package (a tool, a benchmark, the build
backend) loaded as a module from its file, for the tests that call its functions."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load(name: str, relpath: str) -> ModuleType:
    """The module in ``ROOT / relpath``, executed now under the name ``name``."""
    spec = importlib.util.spec_from_file_location(name, ROOT / relpath)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
