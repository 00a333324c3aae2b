"""One training step of PyTorch's ``word_language_model`` example in rnnkit and in PyTorch (run by
hand, never a test).

The model (the example's defaults): vocabulary 8,606 (``--vocab``), embedding and hidden width
200, two LSTM layers, dropout 0.2 after the embedding, between the LSTM layers and before the
output, an output ``Dense`` (``nn.Linear``) over the vocabulary, softmax cross-entropy on the
logits, plain SGD. Batch 20 sequences x 35 steps of synthetic token ids (uniform; the timing does
not depend on the ids). PyTorch runs the example's layout (time first); rnnkit batch first.

Both models hold the same weights (rnnkit's, copied into torch). Before timing, one step without
dropout is run on both and compared: the loss, the gradients of the output layer and of the
embedding table, and the output kernel after the SGD update (float32 tolerance; it stops if they
differ). Then each part runs on both sides INTERLEAVED (rnnkit, torch, torch, rnnkit, ...), and the
medians are reported:

- ``embedding``: lookup forward + backward (scatter-add into the table gradient)
- ``lstm``: both LSTM layers, forward + backward (the input gradient included)
- ``dense``: the output layer, forward + backward (weight, bias and input gradients)
- ``loss``: softmax cross-entropy over the vocabulary, value + gradient w.r.t. the logits
- ``step``: the whole step, dropout on (rnnkit ``model.fit`` on one batch; torch ``zero_grad``,
  forward, loss, ``backward``, ``clip_grad_norm_``, ``optimizer.step``), with the example's
  gradient clipping (``--clip``, 0.25 as in the example: the global norm over every gradient;
  rnnkit ``SGD(global_clipnorm=...)``; ``--clip 0`` for none)

Each part's ratio is the median of the per-repeat ratios (each repeat times both sides back to
back), with their range. ``--phases`` adds the split of rnnkit's whole step by phase (each
layer's forward and backward, the loss, the optimizer with its clipping and update, the rest of
``fit``), in this thread's CPU time.

Usage::

    python benchmarks/bench_wordlm.py                   # about a minute
    python benchmarks/bench_wordlm.py --repeats 5 --threads 1
    python benchmarks/bench_wordlm.py --threads 1 --clock cpu --phases   # a busy machine
    python benchmarks/bench_wordlm.py --json out.json

``--threads N`` sets ``RNNKIT_KERNEL_THREADS``, the BLAS libraries' thread variables
(``OPENBLAS_NUM_THREADS``, ``OMP_NUM_THREADS``, ``MKL_NUM_THREADS``: numpy's BLAS reads them when
numpy loads, so this script sets them before it imports numpy) and ``torch.set_num_threads``:
both sides then run on the same number of threads. ``--clock cpu`` times with this thread's
CPU time (``time.thread_time``) instead of the wall clock: on a machine shared with other work
it leaves out the time other processes take; it needs ``--threads 1`` (everything then runs on
the calling thread, rnnkit's kernels and torch's autograd included).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _threads_before_numpy(argv: list[str]) -> None:
    """``--threads N`` (or ``--threads=N``) in ``argv``: the thread variables every library
    reads when it loads, set before numpy (and its BLAS) is imported."""
    for k, a in enumerate(argv):
        n = argv[k + 1] if a == "--threads" and k + 1 < len(argv) else \
            a.split("=", 1)[1] if a.startswith("--threads=") else None
        if n is not None and n.isdigit():
            for var in ("RNNKIT_KERNEL_THREADS", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS",
                        "MKL_NUM_THREADS"):
                os.environ[var] = n


if __name__ == "__main__":
    _threads_before_numpy(sys.argv[1:])

import numpy as np  # noqa: E402  (after the thread variables)

VOCAB, WIDTH, BATCH, STEPS, LAYERS, DROPOUT, LR, CLIP = 8606, 200, 20, 35, 2, 0.2, 20.0, 0.25


def build(vocab: int, seed: int = 0, clip: float = CLIP) -> tuple[Any, Any]:
    """The rnnkit model (compiled: SGD(lr) with ``global_clipnorm=clip`` when ``clip > 0``,
    sparse CE on logits) and the torch modules holding the same weights: ``{"emb", "lstm",
    "drop", "dec"}`` in a ``torch.nn.ModuleDict``."""
    import torch

    import rnnkit as rk

    model = rk.Sequential([
        rk.Embedding(vocab, WIDTH, seed=seed), rk.Dropout(DROPOUT),
        rk.LSTM(WIDTH, return_sequences=True, seed=seed + 1), rk.Dropout(DROPOUT),
        rk.LSTM(WIDTH, return_sequences=True, seed=seed + 2), rk.Dropout(DROPOUT),
        rk.Dense(vocab, seed=seed + 3)])
    model.compile(optimizer=rk.optimizers.SGD(LR, global_clipnorm=clip if clip > 0 else None),
                  loss=rk.SparseCategoricalCrossentropy(from_logits=True))
    model.build((None, STEPS))
    emb, _, l1, _, l2, _, dec = model.layers
    rng = np.random.default_rng(seed + 9)
    dec.set_weights(dec.weight("kernel"), (0.1 * rng.standard_normal(vocab)).astype(np.float32))
    mods = torch.nn.ModuleDict({
        "emb": torch.nn.Embedding(vocab, WIDTH), "drop": torch.nn.Dropout(DROPOUT),
        "lstm": torch.nn.LSTM(WIDTH, WIDTH, LAYERS, dropout=DROPOUT),
        "dec": torch.nn.Linear(WIDTH, vocab)})

    def t(a: Any) -> Any:
        return torch.from_numpy(np.array(a, np.float32))

    with torch.no_grad():
        mods["emb"].weight.copy_(t(emb.weight("embeddings")))
        for k, lay in enumerate((l1, l2)):      # Keras gate order [i|f|c|o] == torch [i|f|g|o]
            b = np.asarray(lay.weight("bias"))
            getattr(mods["lstm"], f"weight_ih_l{k}").copy_(t(np.asarray(lay.weight("kernel")).T))
            getattr(mods["lstm"], f"weight_hh_l{k}").copy_(t(np.asarray(lay.weight("recurrent_kernel")).T))
            getattr(mods["lstm"], f"bias_ih_l{k}").copy_(t(b.sum(axis=0)))
            getattr(mods["lstm"], f"bias_hh_l{k}").zero_()
        mods["dec"].weight.copy_(t(np.asarray(dec.weight("kernel")).T))
        mods["dec"].bias.copy_(t(dec.weight("bias")))
    return model, mods


def torch_logits(mods: Any, tokens_tb: Any) -> Any:
    """The example's forward: (T, B) ids -> (T * B, vocab) logits."""
    e = mods["drop"](mods["emb"](tokens_tb))
    h, _ = mods["lstm"](e)
    return mods["dec"](mods["drop"](h)).reshape(-1, mods["dec"].out_features)


def set_dropout(model: Any, mods: Any, rate: float) -> None:
    for lay in model.layers:
        if type(lay).__name__ == "Dropout":
            lay.rate = rate
    mods["drop"].p = rate
    mods["lstm"].dropout = rate


def check_same(model: Any, mods: Any, x: np.ndarray, y: np.ndarray, clip: float,
               rtol: float = 2e-4) -> dict[str, float]:
    """One step without dropout on both sides; the largest relative differences (stops when one
    exceeds ``rtol``). Leaves both models as they were."""
    import torch
    import torch.nn.functional as F

    import rnnkit as rk

    set_dropout(model, mods, 0.0)
    emb, dec = model.layers[0], model.layers[-1]
    ctx = rk.Ctx.training(0)
    logits = model.forward(x, ctx)
    loss, g = model.loss.value_and_grad(y, logits)
    model.backward(g, ctx)
    xt = torch.from_numpy(x.T.copy())
    mods.zero_grad(set_to_none=True)
    lt = F.cross_entropy(torch_logits(mods, xt), torch.from_numpy(y.T.reshape(-1).copy()))
    lt.backward()

    def rel(a: np.ndarray, b: Any) -> float:
        b = b.detach().numpy()
        return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))

    before = [np.asarray(w).copy() for w in model.get_weights()]
    model.fit(x, y, epochs=1, batch_size=x.shape[0], shuffle=False, verbose=0)
    with torch.no_grad():
        scale = 1.0
        if clip > 0:
            total = torch.nn.utils.get_total_norm([p.grad for p in mods.parameters()])
            scale = min(1.0, clip / (float(total) + 1e-6))
        new_dec = mods["dec"].weight - LR * scale * mods["dec"].weight.grad
    diffs = {
        "loss": abs(loss - lt.item()) / abs(lt.item()),
        "dense kernel grad": rel(ctx.grad(dec, "kernel"), mods["dec"].weight.grad.T),
        "dense bias grad": rel(ctx.grad(dec, "bias"), mods["dec"].bias.grad),
        "embedding grad": rel(ctx.grad(emb, "embeddings"), mods["emb"].weight.grad),
        "kernel after SGD": rel(np.asarray(dec.weight("kernel")), new_dec.T),
    }
    model.set_weights(before)
    mods.zero_grad(set_to_none=True)
    set_dropout(model, mods, DROPOUT)
    bad = {k: v for k, v in diffs.items() if not v <= rtol}
    if bad:
        raise SystemExit(f"rnnkit and torch disagree: {bad} (relative, tolerance {rtol})")
    return diffs


Runners = dict[str, tuple[Callable[[], Any], Callable[[], Any]]]


def part_runners(model: Any, mods: Any, x: np.ndarray, y: np.ndarray, clip: float) -> Runners:
    import torch
    import torch.nn.functional as F

    import rnnkit as rk

    emb, _, l1, _, l2, _, dec = model.layers
    rng = np.random.default_rng(3)
    B, T, V = x.shape[0], x.shape[1], dec.units
    ge = rng.standard_normal((B, T, WIDTH)).astype(np.float32)
    h = (0.5 * rng.standard_normal((B, T, WIDTH))).astype(np.float32)
    gl = (rng.standard_normal((B, T, V)) / (B * T)).astype(np.float32)
    logits = model.forward(x, rk.Ctx.inference())
    xt, yt = torch.from_numpy(x.T.copy()), torch.from_numpy(y.T.reshape(-1).copy())
    ht = torch.from_numpy(h.transpose(1, 0, 2).copy()).requires_grad_(True)
    get = torch.from_numpy(ge.transpose(1, 0, 2).copy())
    glt = torch.from_numpy(gl.transpose(1, 0, 2).copy())
    lt = torch.from_numpy(logits.transpose(1, 0, 2).reshape(-1, V).copy()).requires_grad_(True)
    lstm_t = mods["lstm"]

    def rk_emb() -> Any:
        ctx = rk.Ctx.training(0)
        emb.forward(x, ctx)
        return emb.backward(ge, ctx)

    def t_emb() -> Any:
        mods["emb"].weight.grad = None
        mods["emb"](xt).backward(get)

    def rk_lstm() -> Any:
        ctx = rk.Ctx.training(0)
        l2.forward(l1.forward(h, ctx), ctx)
        return l1.backward(l2.backward(ge, ctx), ctx)

    def t_lstm() -> Any:
        ht.grad = None
        lstm_t.zero_grad(set_to_none=True)
        o, _ = lstm_t(ht)
        o.backward(get)

    def rk_dense() -> Any:
        ctx = rk.Ctx.training(0)
        dec.forward(h, ctx)
        return dec.backward(gl, ctx)

    def t_dense() -> Any:
        ht.grad = None
        mods["dec"].zero_grad(set_to_none=True)
        mods["dec"](ht).backward(glt)

    def rk_loss() -> Any:
        return model.loss.value_and_grad(y, logits)

    def t_loss() -> Any:
        lt.grad = None
        F.cross_entropy(lt, yt).backward()

    params = list(mods.parameters())
    opt = torch.optim.SGD(params, lr=LR)
    mods.train()

    def rk_step() -> Any:
        return model.fit(x, y, epochs=1, batch_size=B, shuffle=False, verbose=0)

    def t_step() -> Any:
        opt.zero_grad(set_to_none=True)
        F.cross_entropy(torch_logits(mods, xt), yt).backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()

    return {"embedding": (rk_emb, t_emb), "lstm": (rk_lstm, t_lstm), "dense": (rk_dense, t_dense),
            "loss": (rk_loss, t_loss), "step": (rk_step, t_step)}


def time_interleaved(run_a: Callable[[], Any], run_b: Callable[[], Any], repeats: int, warmup: int,
                     clock: Callable[[], float]) -> tuple[list[float], list[float]]:
    """Each repeat times ``run_a`` and ``run_b`` once each, back to back, in alternating order."""
    for _ in range(warmup):
        run_a()
        run_b()
    ta: list[float] = []
    tb: list[float] = []
    for r in range(repeats):
        order = [(run_a, ta), (run_b, tb)]
        if r % 2:
            order.reverse()
        for fn, acc in order:
            t0 = clock()
            fn()
            acc.append(clock() - t0)
    return ta, tb


def step_phases(model: Any, run: Callable[[], Any], repeats: int) -> dict[str, float]:
    """Milliseconds of this thread's CPU time per step spent in each phase of ``run`` (rnnkit's
    whole step), medians over ``repeats`` steps; ``"rest"`` is what the phases leave out of the
    step (``fit``'s own work: batching, the finite checks, the logs)."""
    acc: dict[str, float] = collections.defaultdict(float)
    saved: list[tuple[Any, str]] = []

    def wrap(obj: Any, meth: str, key: str) -> None:
        f = getattr(obj, meth)

        def timed(*a: Any, **k: Any) -> Any:
            t0 = time.thread_time()
            try:
                return f(*a, **k)
            finally:
                acc[key] += time.thread_time() - t0

        saved.append((obj, meth))
        setattr(obj, meth, timed)

    for k, lay in enumerate(model.layers):
        name = f"{k}:{type(lay).__name__}"
        wrap(lay, "forward", f"{name} forward")
        wrap(lay, "backward", f"{name} backward")
    wrap(model.loss, "value_and_grad", "loss (value and gradient)")
    opt = model.optimizer
    wrap(opt, "apply_gradients", "optimizer")
    wrap(opt, "_clip", "  of which clipping")
    wrap(opt, "_update", "  of which updates")
    per: dict[str, list[float]] = collections.defaultdict(list)
    try:
        run()
        for _ in range(repeats):
            acc.clear()
            t0 = time.thread_time()
            run()
            whole = time.thread_time() - t0
            for k, v in acc.items():
                per[k].append(v)
            per["rest"].append(whole - sum(v for k, v in acc.items() if not k.startswith(" ")))
            per["STEP"].append(whole)
    finally:
        for obj, meth in saved:
            delattr(obj, meth)
    return {k: statistics.median(v) * 1e3 for k, v in per.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vocab", type=int, default=VOCAB)
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clip", type=float, default=CLIP, help="global gradient norm clip (0: none)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--phases", action="store_true", help="also split rnnkit's step by phase")
    ap.add_argument("--parts", default="embedding,lstm,dense,loss,step")
    ap.add_argument("--json", type=Path, default=None, help="also write the results here")
    args = ap.parse_args(argv)
    if args.clock == "cpu" and args.threads != 1:
        ap.error("--clock cpu needs --threads 1 (the CPU time of the calling thread only)")
    if args.threads is not None:
        os.environ["RNNKIT_KERNEL_THREADS"] = str(args.threads)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    model, mods = build(args.vocab, clip=args.clip)
    rng = np.random.default_rng(1)
    x = rng.integers(0, args.vocab, (BATCH, STEPS))
    y = rng.integers(0, args.vocab, (BATCH, STEPS))
    diffs = check_same(model, mods, x, y, args.clip)
    print("same step on both (max relative difference): "
          + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    runs = part_runners(model, mods, x, y, args.clip)
    rows: dict[str, dict[str, Any]] = {}
    print(f"threads {args.threads}, clock {args.clock}, clip {args.clip}, {args.repeats} repeats")
    print(f"{'part':<10} {'rnnkit ms':>10} {'torch ms':>10} {'ratio':>7}  {'ratio range':>13}")
    for part in args.parts.split(","):
        a, b = runs[part]
        ta, tb = time_interleaved(a, b, args.repeats, args.warmup, clock)
        ma, mb = statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
        ratios = [p / q for p, q in zip(ta, tb, strict=True)]
        r = statistics.median(ratios)
        rows[part] = {"rnnkit_ms": ma, "torch_ms": mb, "ratio": r, "ratios": ratios}
        print(f"{part:<10} {ma:>10.2f} {mb:>10.2f} {r:>7.3f}  {min(ratios):>6.3f}-{max(ratios):.3f}",
              flush=True)
    phases = None
    if args.phases:
        phases = step_phases(model, runs["step"][0], args.repeats)
        print("rnnkit step by phase (this thread's CPU ms, medians):")
        for k, v in phases.items():
            print(f"  {k:<28} {v:8.2f}")
    if args.json is not None:
        args.json.write_text(json.dumps({"vocab": args.vocab, "threads": args.threads, "clip": args.clip,
                                         "clock": args.clock, "check": diffs, "parts": rows,
                                         "phases": phases}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
