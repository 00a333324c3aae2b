"""Print the measured torch parity of rnnkit's recurrent layers: max abs and max rel errors of
the outputs, the input gradient and the weight gradients, per cell x direction x
return_sequences, in float32 (and float64 with ``--float64``).

The relative error of an array is ``max|ours - torch| / max|torch|``. torch's SimpleRNN is
``torch.nn.RNN`` (tanh), its GRU is rnnkit's ``GRU(reset_after=True)``; go_backwards runs torch
on the input flipped with ``torch.flip``. Shapes: batch 8, 12 timesteps, 6 features, 16 units;
weights U(-0.6, 0.6). Run: ``python tools/parity_report.py [--float64]`` (needs torch).
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from torch_layout import TORCH_CELLS, max_abs, max_rel, ours_run, random_params, torch_run  # noqa: E402

B, T, F, H = 8, 12, 6, 16


def main(argv: list[str]) -> None:
    dtypes = ["float32"] + (["float64"] if "--float64" in argv else [])
    head = (f"{'dtype':<8} {'cell':<10} {'dir':<4} {'rs':<5} {'out abs':>9} {'out rel':>9} "
            f"{'dx abs':>9} {'dx rel':>9} {'dW abs':>9} {'dW rel':>9}")
    print(head)
    print("-" * len(head))
    worst = {d: [0.0, 0.0, 0.0] for d in dtypes}
    for dtype in dtypes:
        for cell in TORCH_CELLS:
            rng = np.random.default_rng(7)
            params = random_params(cell, F, H, rng)
            x = rng.standard_normal((B, T, F))
            G = rng.standard_normal((B, T, H))
            for gb in (False, True):
                for rs in (False, True):
                    g = G if rs else G[:, -1]
                    ty, tdx, tgr = torch_run(cell, params, x, g, rs, gb, dtype)
                    y, dx, gr = ours_run(cell, params, x, g, rs, gb, dtype)
                    dw_abs = max(max_abs(a, b) for a, b in zip(gr, tgr, strict=True))
                    dw_rel = max(max_rel(a, b) for a, b in zip(gr, tgr, strict=True))
                    row = (max_abs(y, ty), max_rel(y, ty), max_abs(dx, tdx), max_rel(dx, tdx),
                           dw_abs, dw_rel)
                    worst[dtype] = [max(worst[dtype][0], row[0]), max(worst[dtype][1], row[3]),
                                    max(worst[dtype][2], row[5])]
                    print(f"{dtype:<8} {cell:<10} {'bwd' if gb else 'fwd':<4} {str(rs):<5} "
                          + " ".join(f"{v:9.2e}" for v in row))
    for dtype, (o, d, w) in worst.items():
        print(f"worst {dtype}: output max abs {o:.2e}, input grad max rel {d:.2e}, "
              f"weight grad max rel {w:.2e}")


if __name__ == "__main__":
    main(sys.argv[1:])
