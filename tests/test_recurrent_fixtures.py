"""Torch parity WITHOUT torch: rnnkit against the stored torch results of
``tests/data/torch_reference.npz`` (written by ``tools/make_torch_fixtures.py``; torch 2.13.0).

The same checks as the live tests: outputs (float32, max abs <= 1e-5), the input gradient and
the weight gradients (relative ``max|ours - torch| / max|torch|`` <= 1e-4), for every cell x
``return_sequences`` x ``go_backwards``. This module never imports torch.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from torch_layout import TORCH_CELLS, max_abs, max_rel, ours_run

FIXTURE = Path(__file__).resolve().parent / "data" / "torch_reference.npz"
GRAD_NAMES = ("d_weight_ih", "d_weight_hh", "d_bias_ih", "d_bias_hh")


@pytest.fixture(scope="module")
def ref() -> dict[str, np.ndarray]:
    with np.load(FIXTURE, allow_pickle=False) as d:
        return {k: d[k] for k in d.files}


def test_fixture_holds_every_cell_and_flag(ref: dict[str, np.ndarray]) -> None:
    assert str(ref["torch_version"]).startswith("2.13.0")
    for cell in TORCH_CELLS:
        B, T, _ = ref[f"{cell}.x"].shape
        H = ref[f"{cell}.weight_hh"].shape[1]
        assert ref[f"{cell}.out_seq"].shape == (2, B, T, H)
        assert ref[f"{cell}.dx"].shape == (2, 2, *ref[f"{cell}.x"].shape)
        assert np.all(np.isfinite(ref[f"{cell}.out_seq"])) and np.abs(ref[f"{cell}.out_seq"]).max() > 0.05


@pytest.mark.parametrize("go_backwards", [0, 1], ids=["fwd", "bwd"])
@pytest.mark.parametrize("return_sequences", [0, 1], ids=["last", "seq"])
@pytest.mark.parametrize("cell", list(TORCH_CELLS))
def test_parity_with_stored_torch_results(ref: dict[str, np.ndarray], cell: str,
                                          return_sequences: int, go_backwards: int) -> None:
    params = tuple(ref[f"{cell}.{n}"] for n in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))
    x, G = ref[f"{cell}.x"], ref[f"{cell}.G"]
    if not return_sequences:
        G = G[:, -1]
    y, dx, grads = ours_run(cell, params, x, G, bool(return_sequences), bool(go_backwards))
    t_out = ref[f"{cell}.out_seq" if return_sequences else f"{cell}.out_last"][go_backwards]
    assert y.shape == t_out.shape
    assert max_abs(y, t_out) <= 1e-5
    assert max_rel(dx, ref[f"{cell}.dx"][return_sequences, go_backwards]) <= 1e-4
    for name, g in zip(GRAD_NAMES, grads, strict=True):
        t_g = ref[f"{cell}.{name}"][return_sequences, go_backwards]
        assert g.shape == t_g.shape and max_rel(g, t_g) <= 1e-4, name


def test_go_backwards_outputs_are_in_processing_order(ref: dict[str, np.ndarray]) -> None:
    """The stored go_backwards sequence is NOT the forward one reversed (so the parity above
    pins the order); its last slot is the go_backwards final state."""
    for cell in TORCH_CELLS:
        seq = ref[f"{cell}.out_seq"]
        assert max_abs(seq[1], seq[0][:, ::-1]) > 1e-3
        np.testing.assert_array_equal(seq[1][:, -1], ref[f"{cell}.out_last"][1])


def test_runs_where_torch_cannot_import() -> None:
    """The fixture parity needs neither torch nor anything that imports it."""
    code = (
        "import sys; sys.modules['torch'] = None\n"
        f"sys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import numpy as np\n"
        "from torch_layout import ours_run, max_abs\n"
        f"d = np.load({str(FIXTURE)!r})\n"
        "p = tuple(d['LSTM.' + n] for n in ('weight_ih', 'weight_hh', 'bias_ih', 'bias_hh'))\n"
        "y, _, _ = ours_run('LSTM', p, d['LSTM.x'], d['LSTM.G'], True, True)\n"
        "assert max_abs(y, d['LSTM.out_seq'][1]) <= 1e-5\n"
        "print('ok')\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
