"""The build backend (``build_backend/rnnkit_build.py``): setuptools' hooks, and at an editable
install the command line's kernels compiled into Numba's cache by ``python -m rnnkit compile``;
a failed compilation never fails the install."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from file_modules import load

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict[str, Any]:
    toml = pytest.importorskip("tomllib")   # Python 3.11+
    with open(ROOT / "pyproject.toml", "rb") as fh:
        got: dict[str, Any] = toml.load(fh)
    return got


def _backend() -> ModuleType:
    pytest.importorskip("setuptools")
    return load("rnnkit_build", "build_backend/rnnkit_build.py")


def test_pyproject_names_this_backend_and_the_sdist_carries_it() -> None:
    bs = _pyproject()["build-system"]
    assert bs["build-backend"] == "rnnkit_build"
    assert bs["backend-path"] == ["build_backend"]
    assert "include build_backend/rnnkit_build.py" in (ROOT / "MANIFEST.in").read_text().splitlines()


def test_an_editable_build_needs_the_runtime_dependencies_unless_turned_off(monkeypatch: Any) -> None:
    b = _backend()
    deps = _pyproject()["project"]["dependencies"]
    own = list(b._setuptools.get_requires_for_build_editable(None))
    monkeypatch.delenv(b.ENV, raising=False)
    assert b.cells() == "all"
    assert b.get_requires_for_build_editable() == own + deps
    assert any(d.startswith("numba") for d in deps)
    for off in ("0", "", " 0 "):
        monkeypatch.setenv(b.ENV, off)
        assert b.cells() is None
        assert b.get_requires_for_build_editable() == own
    monkeypatch.setenv(b.ENV, "lstm,gru")
    assert b.cells() == "lstm,gru"


def test_build_editable_builds_the_wheel_then_compiles_the_chosen_cells(monkeypatch: Any) -> None:
    b = _backend()
    calls: list[tuple[Any, ...]] = []
    monkeypatch.setattr(b._setuptools, "build_editable",
                        lambda d, c=None, m=None: calls.append(("wheel", d, c, m)) or "rnnkit-0.1.0.whl")
    monkeypatch.setattr(b, "compile_kernels", lambda todo: calls.append(("compile", todo)) or True)
    monkeypatch.setenv(b.ENV, "gru,rnn")
    assert b.build_editable("/tmp/w", {"k": "v"}, None) == "rnnkit-0.1.0.whl"
    assert calls == [("wheel", "/tmp/w", {"k": "v"}, None), ("compile", "gru,rnn")]
    calls.clear()
    monkeypatch.setenv(b.ENV, "0")
    assert b.build_editable("/tmp/w") == "rnnkit-0.1.0.whl"
    assert calls == [("wheel", "/tmp/w", None, None)]


def test_the_compile_command_runs_this_trees_rnnkit_compile(monkeypatch: Any) -> None:
    b = _backend()
    monkeypatch.setenv("PYTHONPATH", "/elsewhere")
    cmd, env = b.compile_command("lstm,gru")
    assert cmd == [sys.executable, "-m", "rnnkit", "compile", "--cells", "lstm,gru"]
    assert env["PYTHONPATH"] == os.pathsep.join([str(ROOT / "src"), "/elsewhere"])
    monkeypatch.delenv("PYTHONPATH")
    assert b.compile_command("lstm")[1]["PYTHONPATH"] == str(ROOT / "src")


def test_a_failing_compile_warns_and_does_not_raise(monkeypatch: Any, capsys: Any) -> None:
    b = _backend()
    # the real command, with cells rnnkit refuses: it reaches rnnkit's own command line (exit 2)
    assert b.compile_kernels("nonsense") is False
    err = capsys.readouterr().err
    assert "the kernels were not compiled at install (exit status 2: " in err
    assert ("--cells: expected a comma-separated list of lstm, gru, rnn, gru-after, lstm-proj, or all, "
            "got 'nonsense'") in err
    sleep = [sys.executable, "-c", "import time; time.sleep(30)"]
    monkeypatch.setattr(b, "compile_command", lambda todo: (sleep, dict(os.environ)))
    monkeypatch.setattr(b, "TIMEOUT_S", 0.5)
    assert b.compile_kernels("lstm") is False
    assert "(TimeoutExpired: " in capsys.readouterr().err
    monkeypatch.setattr(b, "compile_command", lambda todo: (["/nonexistent/python"], dict(os.environ)))
    assert b.compile_kernels("lstm") is False
    assert "(FileNotFoundError: " in capsys.readouterr().err


def test_a_successful_compile_says_so(monkeypatch: Any, capsys: Any) -> None:
    b = _backend()
    monkeypatch.setattr(b, "compile_command", lambda todo: (
        [sys.executable, "-c", "print('rnnkit: compiled in 1.0 s')"], dict(os.environ)))
    assert b.compile_kernels("lstm") is True
    err = capsys.readouterr().err
    assert "rnnkit: compiled in 1.0 s" in err
    assert "rnnkit: kernels compiled at install in " in err
