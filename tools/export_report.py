"""Measure every export format x cell: the largest |foreign - rnnkit| over go_backwards,
return_sequences and use_bias, two batch sizes and two lengths (float32). Not run by CI (the
tests check the same values against 1e-5); prints a Markdown table.

    KERAS_BACKEND=torch PYTHONPATH=src python tools/export_report.py
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

os.environ.setdefault("KERAS_BACKEND", "torch")
import rnnkit as rk  # noqa: E402

CELLS: list[tuple[str, Any]] = [
    ("SimpleRNN tanh", lambda **k: rk.SimpleRNN(5, **k)),
    ("SimpleRNN relu", lambda **k: rk.SimpleRNN(5, "relu", **k)),
    ("LSTM", lambda **k: rk.LSTM(5, **k)),
    ("LSTM hard_sigmoid gates", lambda **k: rk.LSTM(5, recurrent_activation="hard_sigmoid", **k)),
    ("GRU reset_after=False", lambda **k: rk.GRU(5, **k)),
    ("GRU reset_after=True", lambda **k: rk.GRU(5, reset_after=True, **k)),
]
SIZES = [(2, 5), (5, 9)]


def randomise(layers: list[Any], seed: int) -> None:
    rng = np.random.default_rng(seed)
    for layer in layers:
        for n in layer.weight_names:
            w = layer.weight(n)
            layer.set_weight(n, rng.normal(0.0, 0.5, w.shape).astype(w.dtype))


def onnx_error(model: Any, d: Path) -> float:
    import onnxruntime as ort

    rk.save_onnx(model, d / "m.onnx")
    sess = ort.InferenceSession(str(d / "m.onnx"))
    rng = np.random.default_rng(1)
    worst = 0.0
    for B, T in SIZES:
        x = rng.normal(size=(B, T, 3)).astype(np.float32)
        worst = max(worst, float(np.abs(sess.run(None, {"input": x})[0] - model.predict(x)).max()))
    return worst


def keras_error(model: Any, d: Path) -> float:
    import keras

    rk.save_keras(model, d / "m.keras")
    km = keras.saving.load_model(str(d / "m.keras"))
    rng = np.random.default_rng(2)
    worst = 0.0
    for B, T in SIZES:
        x = rng.normal(size=(B, T, 3)).astype(np.float32)
        worst = max(worst, float(np.abs(np.asarray(km.predict(x, verbose=0)) - model.predict(x)).max()))
    back = rk.load_keras(d / "m.keras")
    assert all(np.array_equal(a, b) for a, b in zip(model.get_weights(), back.get_weights(), strict=True))
    return worst


def torch_error(make: Any, d: Path) -> float | str:
    import torch
    from safetensors.torch import load_file

    layer = make(return_sequences=True)
    layer.build(rk.Shape((None, None, 3)))
    randomise([layer], 3)
    try:
        rk.save_torch_safetensors(layer, d / "t.safetensors")
    except rk.Error as e:
        return f"refused ({str(e).split(':')[1].strip()[:40]}...)"
    kind = type(layer).__name__
    kw = {"nonlinearity": layer.activation.name} if kind == "SimpleRNN" else {}
    mod = getattr(torch.nn, {"SimpleRNN": "RNN"}.get(kind, kind))(3, 5, batch_first=True, **kw)
    mod.load_state_dict(load_file(d / "t.safetensors"))
    x = np.random.default_rng(4).normal(size=(3, 7, 3)).astype(np.float32)
    with torch.no_grad():
        return float(np.abs(mod(torch.from_numpy(x))[0].numpy() - layer.predict(x)).max())


def main() -> int:
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        for name, make in CELLS:
            o = k = 0.0
            for gb, seqs, bias in itertools.product([False, True], repeat=3):
                model = rk.Sequential([make(go_backwards=gb, return_sequences=seqs, use_bias=bias)],
                                      input_shape=(None, None, 3))
                randomise(model.layers, 0)
                o = max(o, onnx_error(model, d))
                k = max(k, keras_error(model, d))
            t = torch_error(make, d)
            rows.append((name, o, k, t))
    print("| cell | ONNX (onnxruntime) | Keras (load_model) | PyTorch (load_state_dict) |")
    print("|---|---|---|---|")
    for name, o, k, t in rows:
        ts = t if isinstance(t, str) else f"{t:.1e}"
        print(f"| {name} | {o:.1e} | {k:.1e} | {ts} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
