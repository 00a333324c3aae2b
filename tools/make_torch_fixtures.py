"""Write ``tests/data/torch_reference.npz``: PyTorch reference results for the recurrent layers,
so the test suite checks torch parity where torch is not installed.

Per cell (``SimpleRNN`` = torch.nn.RNN tanh, ``LSTM``, ``GRU`` = torch.nn.GRU, i.e. rnnkit's
``reset_after=True``) the file holds, in float32 and in torch's layout:

- ``{cell}.x`` (B, T, F) input, ``{cell}.G`` (B, T, H) upstream gradient (the loss is
  ``sum(output * G)``; without return_sequences the upstream gradient is ``G[:, -1]``),
- ``{cell}.weight_ih`` / ``weight_hh`` / ``bias_ih`` / ``bias_hh`` the torch parameters,
- results stacked over the flags, index ``[rs, gb]`` (return_sequences, go_backwards in {0, 1};
  go_backwards = torch on the input flipped with ``torch.flip``):
  ``{cell}.out_seq`` (2 gb, B, T, H), ``{cell}.out_last`` (2 gb, B, H),
  ``{cell}.dx`` (2, 2, B, T, F), ``{cell}.d_weight_ih`` (2, 2, ...), ``d_weight_hh``,
  ``d_bias_ih``, ``d_bias_hh``.

Run: ``python tools/make_torch_fixtures.py`` (needs torch; deterministic for a torch version).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from torch_layout import TORCH_CELLS, random_params, torch_run  # noqa: E402

B, T, F, H = 2, 3, 3, 2
OUT = ROOT / "tests" / "data" / "torch_reference.npz"


def main() -> None:
    import torch

    arrays: dict[str, np.ndarray] = {"torch_version": np.array(torch.__version__)}
    rng = np.random.default_rng(20260)
    for cell in TORCH_CELLS:
        params = random_params(cell, F, H, rng)
        x = rng.standard_normal((B, T, F))
        G = rng.standard_normal((B, T, H))
        res = {(rs, gb): torch_run(cell, params, x, G if rs else G[:, -1], bool(rs), bool(gb))
               for rs in (0, 1) for gb in (0, 1)}
        arrays[f"{cell}.x"] = x.astype(np.float32)
        arrays[f"{cell}.G"] = G.astype(np.float32)
        for name, p in zip(("weight_ih", "weight_hh", "bias_ih", "bias_hh"), params, strict=True):
            arrays[f"{cell}.{name}"] = p.astype(np.float32)
        arrays[f"{cell}.out_seq"] = np.stack([res[1, gb][0] for gb in (0, 1)])
        arrays[f"{cell}.out_last"] = np.stack([res[0, gb][0] for gb in (0, 1)])
        arrays[f"{cell}.dx"] = np.stack([np.stack([res[rs, gb][1] for gb in (0, 1)]) for rs in (0, 1)])
        for k, name in enumerate(("d_weight_ih", "d_weight_hh", "d_bias_ih", "d_bias_hh")):
            arrays[f"{cell}.{name}"] = np.stack(
                [np.stack([res[rs, gb][2][k] for gb in (0, 1)]) for rs in (0, 1)])
    OUT.parent.mkdir(parents=True, exist_ok=True)
    tmp = OUT.with_name(OUT.name + ".tmp")
    with open(tmp, "wb") as fh:  # atomic: write aside, then replace
        np.savez_compressed(fh, **arrays)  # type: ignore[arg-type]
    os.replace(tmp, OUT)
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes, {len(arrays)} arrays, torch {torch.__version__})")


if __name__ == "__main__":
    main()
