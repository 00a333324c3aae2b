"""What a user sees of the package itself: the licence, the changelog, the metadata, ``rnnkit
--version``, where ``rnnkit bench`` writes, and the NumPy fallback where numba cannot be
imported (run end to end in a fresh process whose imports of numba are blocked)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.cli import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = (ROOT / "pyproject.toml").read_text()


def test_licence_changelog_and_metadata() -> None:
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) 2026 the rnnkit authors" in text
    assert "Permission is hereby granted, free of charge" in text
    log = (ROOT / "CHANGELOG.md").read_text()
    assert log.startswith("# Changelog") and f"## {rk.__version__} - " in log
    assert 'authors = [{ name = "the rnnkit authors" }]' in PYPROJECT
    version = re.search(r'^version = "([^"]+)"', PYPROJECT, re.M)
    assert version is not None and version.group(1) == rk.__version__


def test_version_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"rnnkit {rk.__version__}"


def test_bench_writes_under_the_current_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("torch")
    script = tmp_path / "bench.py"
    script.write_text("import json, sys\n"
                      "def main(argv):\n"
                      "    open(sys.argv[0] == 'rnnkit bench' and 'argv.json', 'w').write(json.dumps(argv))\n"
                      "    return 0\n")
    monkeypatch.setenv("RNNKIT_BENCH", str(script))
    monkeypatch.chdir(tmp_path)
    assert main(["bench", "--cells", "lstm"]) == 0
    assert json.loads((tmp_path / "argv.json").read_text()) == [
        "--cells", "lstm", "--results", str(tmp_path / "rnnkit_out" / "bench")]
    for own in (["--results", "elsewhere"], ["--no-save"], ["--update-latest"], ["--results=x"]):
        assert main(["bench", *own]) == 0
        assert json.loads((tmp_path / "argv.json").read_text()) == own


BLOCKED = """
import importlib.abc, json, sys, warnings
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.split(".")[0] in ("numba", "llvmlite"):
            raise {error}(f"No module named {{name!r}} (blocked for the test)")
        return None
sys.meta_path.insert(0, Block())
import numpy as np
import rnnkit as rk
from fallback_model import run
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    pred = run()
print(json.dumps({{"pred": pred.tolist(), "available": rk.kernels.available(),
                  "numba_loaded": "numba" in sys.modules,
                  "warnings": [str(w.message) for w in caught if w.category is RuntimeWarning]}}))
"""

MODEL = """
import numpy as np
import rnnkit as rk

def run():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 5, 2)).astype(np.float32)
    y = x.sum(axis=(1, 2))[:, None].astype(np.float32)
    m = rk.Sequential([rk.LSTM(4, seed=0), rk.Dense(1, seed=1)], input_shape=(None, 5, 2))
    m.compile(rk.Adam(0.01), "mse")
    m.fit(x, y, 3, batch_size=8, verbose=0, seed=0)
    return m.predict(x)
"""


@pytest.mark.parametrize("error", ["ModuleNotFoundError", "ImportError"])
def test_without_numba_fit_and_predict_run_the_reference(tmp_path: Path, error: str) -> None:
    (tmp_path / "fallback_model.py").write_text(MODEL)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT / "src")])}
    env.pop("RNNKIT_KERNELS", None)
    r = subprocess.run([sys.executable, "-c", BLOCKED.format(error=error)], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["available"] is False and got["numba_loaded"] is False
    assert len(got["warnings"]) == 1 and "running the NumPy reference instead" in got["warnings"][0]
    sys.path.insert(0, str(tmp_path))
    try:
        from fallback_model import run
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fallback_model", None)
    with rk.kernels.use("reference"):
        want = run()
    np.testing.assert_allclose(np.asarray(got["pred"], dtype=np.float32), want, rtol=1e-6, atol=1e-7)
