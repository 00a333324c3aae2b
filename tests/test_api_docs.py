"""The API reference site: a page for every public name of ``rnnkit`` and of its public
subpackages (listed here independently of the generator), and ``mkdocs build --strict`` (every
warning an error) succeeds where mkdocs and mkdocstrings are installed, with an anchor for every
name in the built pages."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import rnnkit
from file_modules import load

ROOT = Path(__file__).resolve().parents[1]


def _generator():  # type: ignore[no-untyped-def]
    return load("mkdocs_api_under_test", "tools/mkdocs_api.py")


def public_names() -> dict[str, list[str]]:
    """module -> the qualified public names it exports."""
    out = {"rnnkit": [f"rnnkit.{n}" for n in rnnkit.__all__]}
    for info in pkgutil.iter_modules(rnnkit.__path__):
        if not info.name.startswith("_"):
            mod = importlib.import_module(f"rnnkit.{info.name}")
            if getattr(mod, "__all__", None):
                out[mod.__name__] = [f"{mod.__name__}.{n}" for n in mod.__all__]
    return out


def test_every_public_name_has_an_entry() -> None:
    pages = _generator().pages()
    names = public_names()
    assert len(names) >= 10 and sum(map(len, names.values())) >= 200
    for module, quals in names.items():
        text = pages[f"api/{module}.md"]
        for qual in quals:
            assert f"::: {qual}\n" in text or f"{{#{qual}}}" in text, (module, qual)
    assert all(f"({m}.md)" in pages["api/index.md"] for m in names)


@pytest.mark.timeout(300)
def test_site_builds_with_warnings_as_errors(tmp_path: Path) -> None:
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings_handlers.python")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), str(ROOT)])}
    cmd = [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")]
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env, timeout=280)
    assert r.returncode == 0, r.stderr[-3000:]
    for module, quals in public_names().items():
        html = (tmp_path / "site" / "api" / module / "index.html").read_text()
        missing = [q for q in quals if f'id="{q}"' not in html]
        assert not missing, (module, missing)
    assert "Recurrent layers" in (tmp_path / "site" / "index.html").read_text()
