"""A page's examples run with the extras the page names: every third-party module the Python
blocks of docs/serving.md import is installed by numpy/rnnkit's own dependencies or the
``serve`` extra it names; the README names the extras for pictures, .keras/.onnx files and serving."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: module -> the distribution that installs it (where the names differ)
PROVIDED_BY = {"websockets": "uvicorn"}      # uvicorn[standard] brings websockets


def _requirement_names(reqs: list[str]) -> set[str]:
    return {re.split(r"[\[<>=;! ]", r, maxsplit=1)[0].lower() for r in reqs}


def test_serving_page_imports_only_what_serve_installs() -> None:
    toml = pytest.importorskip("tomllib")   # Python 3.11+
    meta = toml.loads((ROOT / "pyproject.toml").read_text())["project"]
    have = (_requirement_names(meta["dependencies"])
            | _requirement_names(meta["optional-dependencies"]["serve"]))
    text = (ROOT / "docs" / "serving.md").read_text()
    assert '".[serve]"' in text
    code = "\n".join(m.group(1) for m in re.finditer(r"^```python\n(.*?)^```$", text, re.S | re.M))
    mods = {m.group(1).split(".")[0] for m in re.finditer(r"^\s*(?:from|import) ([\w.]+)", code, re.M)}
    third = {m for m in mods if m not in sys.stdlib_module_names and m != "rnnkit"}
    missing = sorted(m for m in third if PROVIDED_BY.get(m, m).lower() not in have)
    assert not missing, f"docs/serving.md imports {missing}, which the serve extra does not install"


def test_readme_names_the_extras() -> None:
    text = (ROOT / "README.md").read_text()
    for extra in ("plot", "interop", "onnx", "serve", "forecast"):
        assert f"`{extra}`" in text, extra
    assert 'pip install -e ".[plot,interop,onnx,serve,forecast]"' in text
