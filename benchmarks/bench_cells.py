"""A user's compiled cells (the peephole LSTM and MGU of docs/custom-cells.md) against the
built-in ones: ``bench.py --user-cells`` (run by hand, never a test)."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from bench import SHAPES, time_pair


def _page_cells() -> dict[str, Any]:
    """The compiled peephole LSTM and MGU of docs/custom-cells.md, run as an importable module."""
    import re
    import types

    page = Path(__file__).resolve().parents[1] / "docs" / "custom-cells.md"
    blocks = re.findall(r"^```python\n(.*?)^```$", page.read_text(), re.S | re.M)
    mod = types.ModuleType("rnnkit_docs_custom_cells")
    sys.modules[mod.__name__] = mod
    for code in [blocks[0], *(b for b in blocks if "class PeepholeLSTMCell" in b or "class MGUCell" in b)]:
        exec(compile(code, str(page), "exec"), mod.__dict__)   # noqa: S102 - the repository's own page
    return mod.__dict__


def _job(layer: Any, x: np.ndarray, mode: str) -> Callable[[], Any]:
    """One inference pass, or one training forward + backward, of ``layer`` on ``x``."""
    import rnnkit as rk

    if mode == "infer":
        return lambda: layer.forward(x, rk.Ctx.inference())

    def train() -> Any:
        ctx = rk.Ctx.training()
        y = layer.forward(x, ctx)
        return layer.backward(np.ones_like(y), ctx)
    return train


def user_cells(shapes: list[str], modes: list[str], repeats: int, warmup: int,
               sample: float) -> list[dict[str, Any]]:
    """A user's compiled cells against the built-in ones (float32, return_sequences), interleaved:
    peephole LSTM vs LSTM, MGU vs GRU (reset_after=True, as above); ratio = user / built-in."""
    import rnnkit as rk

    ns = _page_cells()
    rows = []
    for sname in shapes:
        B, T, F, H = SHAPES[sname]
        x = np.random.default_rng(7).standard_normal((B, T, F)).astype(np.float32)
        for user, builtin in ((ns["PeepholeLSTMCell"](H), rk.LSTMCell(H)),
                              (ns["MGUCell"](H), rk.GRUResetAfterCell(H))):
            pair = [rk.RecurrentLayer(c, return_sequences=True, seed=0, input_dim=F) for c in (user, builtin)]
            assert all(rk.kernels.find(layer.cell) is not None for layer in pair)
            for mode in modes:
                tu, tb = time_pair(_job(pair[0], x, mode), _job(pair[1], x, mode), repeats, warmup, sample)
                row = {"user": user.name, "builtin": builtin.name, "shape": sname, "mode": mode,
                       "user_s": statistics.median(tu), "builtin_s": statistics.median(tb)}
                row["ratio"] = row["user_s"] / row["builtin_s"]
                rows.append(row)
                print(f"{user.name:12} vs {builtin.name:4} {sname} {mode:5} {row['user_s'] * 1e3:9.3f}ms "
                      f"{row['builtin_s'] * 1e3:9.3f}ms ratio {row['ratio']:.3f}", flush=True)
    return rows
