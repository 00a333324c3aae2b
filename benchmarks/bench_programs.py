"""Composed programs, rnnkit on the gradient tape against PyTorch eager, one thread each, in one
process (run by hand, never a test).

Cases:

===========  ======================================================================================
``s2s``      one training step of PyTorch's attention translation tutorial: GRU encoder and
             decoder, 256 units, additive (Bahdanau) attention, vocabulary 3,000 on both sides,
             batch 32, 10 -> 10 steps, teacher forcing, NLLLoss, Adam. Both sides run the
             tutorial's own ``train_epoch`` on one batch: ``examples/porting/seq2seq_translation/
             original.py`` and its tape port ``rnnkit_port.py`` (forward, loss, gradients of
             every weight, two optimizer steps).
``greedy``   one greedy decoding step of that decoder at batch 1: ``decoder.forward_step`` (an
             embedding, the attention over 10 encoder outputs, a one-step GRU, the 3,000-word
             projection) and the argmax, without a tape / under ``torch.no_grad()``.
``tagger``   one training step of PyTorch's "Sequence Models and LSTM Networks" tagger:
             embedding 64, LSTM 128, 40 tags, one sentence of 20 words (batch 1), log-softmax,
             NLLLoss, SGD(0.1).
===========  ======================================================================================

Both sides start from the same weights (rnnkit's are copied from the torch modules) and, before
any timing, run 3 steps on the same batches: the losses must agree to 1e-5 (the greedy step's
log-probabilities to 1e-5 and its argmax exactly), or the script stops. Threads: one for both
(``RNNKIT_KERNEL_THREADS=1``, ``OMP_NUM_THREADS=1`` / ``OPENBLAS_NUM_THREADS=1`` for NumPy's BLAS,
set before the imports; ``torch.set_num_threads(1)``). Timing: ``--repeats`` samples per side,
interleaved (the side timed first alternates), each sample the mean of an inner loop of about
``--sample`` seconds of this process's CPU time (``time.process_time``: both sides run on one
thread, and on a shared machine the CPU time is what other processes disturb least; wall-clock
time is the same figure on an idle machine); medians reported, and the ratio rnnkit / PyTorch
(below 1: rnnkit faster).

    python benchmarks/bench_programs.py                      # all three, 7 samples each
    python benchmarks/bench_programs.py --cases s2s --repeats 5
    python benchmarks/bench_programs.py --profile s2s        # cProfile of rnnkit's side
"""

from __future__ import annotations

import os

for _var in ("RNNKIT_KERNEL_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import cProfile  # noqa: E402
import importlib.util  # noqa: E402
import pstats  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from types import ModuleType  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn, optim  # noqa: E402
from torch.nn import functional as F  # noqa: E402

import rnnkit as rk  # noqa: E402
from rnnkit import ops  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "porting" / "seq2seq_translation"
VOCAB, HIDDEN, BATCH, LENGTH = 3000, 256, 32, 10
TAGGER_VOCAB, EMB, TAG_HIDDEN, TAGS, WORDS = 1000, 64, 128, 40, 20
TOL = 1e-5


def _load(name: str, path: Path) -> ModuleType:
    sys.path.insert(0, str(path.parent))          # (the example imports its corpus module)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _check(name: str, a: list[float], b: list[float]) -> None:
    diff = max(abs(x - y) for x, y in zip(a, b, strict=True))
    print(f"{name}: losses torch {[round(x, 6) for x in a]} rnnkit {[round(x, 6) for x in b]} "
          f"max|diff| {diff:.1e}")
    if not diff < TOL:
        raise SystemExit(f"{name}: the two sides differ by {diff:.2e} (> {TOL}); not timing")


# -- the attention sequence-to-sequence model --------------------------------------------------------
def s2s_cases() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    orig, port = _load("s2s_original", EXAMPLE / "original.py"), _load("s2s_port", EXAMPLE / "rnnkit_port.py")
    torch.manual_seed(0)
    t_enc = orig.EncoderRNN(VOCAB, HIDDEN, dropout_p=0.0)
    t_dec = orig.AttnDecoderRNN(HIDDEN, VOCAB, dropout_p=0.0)
    r_enc = port.EncoderRNN(VOCAB, HIDDEN, dropout_p=0.0)
    r_dec = port.AttnDecoderRNN(HIDDEN, VOCAB, dropout_p=0.0)
    state = {f"encoder.{k}": v.detach().numpy().copy() for k, v in t_enc.state_dict().items()}
    state.update({f"decoder.{k}": v.detach().numpy().copy() for k, v in t_dec.state_dict().items()})
    port.load_torch_weights(r_enc, r_dec, state)
    rng = np.random.default_rng(0)
    batches = [(rng.integers(2, VOCAB, (BATCH, LENGTH)), rng.integers(2, VOCAB, (BATCH, LENGTH)))
               for _ in range(3)]
    t_batches = [(torch.from_numpy(a), torch.from_numpy(b)) for a, b in batches]
    t_opts = (optim.Adam(t_enc.parameters(), lr=1e-3), optim.Adam(t_dec.parameters(), lr=1e-3))
    r_opts = (rk.Adam(learning_rate=1e-3, epsilon=1e-8), rk.Adam(learning_rate=1e-3, epsilon=1e-8))
    crit = nn.NLLLoss()
    for tb, rb in zip(t_batches, batches, strict=True):
        orig.train_epoch([tb], t_enc, t_dec, *t_opts, crit)
        port.train_epoch([rb], r_enc, r_dec, *r_opts, port.nll_loss)
    _check("s2s", orig.LOSSES, port.LOSSES)

    def torch_step() -> object:
        return orig.train_epoch(t_batches[:1], t_enc, t_dec, *t_opts, crit)

    def rnnkit_step() -> object:
        return port.train_epoch(batches[:1], r_enc, r_dec, *r_opts, port.nll_loss)

    # greedy decoding at batch 1: the encoder's outputs for one sentence, then one decoder step
    src = batches[0][0][:1]
    with torch.no_grad():
        t_out, t_hid = t_enc(torch.from_numpy(src))
    r_out, r_hid = r_enc(src, training=False)
    t_in = torch.full((1, 1), orig.SOS_token, dtype=torch.long)
    r_in = np.full((1, 1), port.SOS_token, dtype=np.int64)
    with torch.no_grad():
        t_logits = t_dec.forward_step(t_in, t_hid, t_out)[0]
    r_logits = r_dec.forward_step(r_in, r_hid, r_out)[0]
    np.testing.assert_allclose(np.asarray(r_logits), t_logits.numpy(), rtol=0, atol=TOL)
    assert int(np.argmax(r_logits)) == int(t_logits.argmax()), "greedy: the argmax differs"
    print(f"greedy: logits max|diff| {np.max(np.abs(np.asarray(r_logits) - t_logits.numpy())):.1e}")

    def torch_greedy() -> object:
        with torch.no_grad():
            out, hid, _ = t_dec.forward_step(t_in, t_hid, t_out)
            return out.topk(1)[1].squeeze(-1), hid

    def rnnkit_greedy() -> object:
        out, hid, _ = r_dec.forward_step(r_in, r_hid, r_out)
        return ops.argmax(out, axis=-1), hid

    return {"s2s": (torch_step, rnnkit_step), "greedy": (torch_greedy, rnnkit_greedy)}


# -- the LSTM tagger ---------------------------------------------------------------------------------
class LSTMTagger(nn.Module):
    """PyTorch's tutorial tagger, as written there."""

    def __init__(self, embedding_dim: int, hidden_dim: int, vocab_size: int, tagset_size: int) -> None:
        super().__init__()
        self.hidden_dim = hidden_dim
        self.word_embeddings = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim)
        self.hidden2tag = nn.Linear(hidden_dim, tagset_size)

    def forward(self, sentence: torch.Tensor) -> torch.Tensor:
        embeds = self.word_embeddings(sentence)
        lstm_out, _ = self.lstm(embeds.view(len(sentence), 1, -1))
        tag_space = self.hidden2tag(lstm_out.view(len(sentence), -1))
        return F.log_softmax(tag_space, dim=1)


class RkTagger:
    """The same tagger on rnnkit's layers and the tape (batch-major: one sentence is (1, 20))."""

    def __init__(self, embedding_dim: int, hidden_dim: int, vocab_size: int, tagset_size: int) -> None:
        self.word_embeddings = rk.Embedding(vocab_size, embedding_dim)
        self.lstm = rk.LSTM(hidden_dim, return_sequences=True, bias_layout="torch")
        self.hidden2tag = rk.Dense(tagset_size)

    def __call__(self, sentence: np.ndarray) -> Any:
        embeds = self.word_embeddings(sentence[None, :])
        lstm_out = self.lstm(embeds)
        tag_space = self.hidden2tag(ops.reshape(lstm_out, (len(sentence), -1)))
        return ops.log_softmax(tag_space, axis=1)

    def trainable_weights(self) -> list[tuple[rk.Layer, str]]:
        return [(layer, n) for layer in (self.word_embeddings, self.lstm, self.hidden2tag)
                for n in layer.trainable_names]


def tagger_cases() -> dict[str, tuple[Callable[[], object], Callable[[], object]]]:
    torch.manual_seed(1)
    t_model = LSTMTagger(EMB, TAG_HIDDEN, TAGGER_VOCAB, TAGS)
    r_model = RkTagger(EMB, TAG_HIDDEN, TAGGER_VOCAB, TAGS)
    sd = {k: v.detach().numpy().copy() for k, v in t_model.state_dict().items()}
    r_model.word_embeddings.build((None, None))
    r_model.word_embeddings.set_weight("embeddings", sd["word_embeddings.weight"])
    rk.io.from_torch_state(r_model.lstm, sd, prefix="lstm.")
    r_model.hidden2tag.build((None, TAG_HIDDEN))
    r_model.hidden2tag.set_weights(sd["hidden2tag.weight"].T, sd["hidden2tag.bias"])
    rng = np.random.default_rng(1)
    data = [(rng.integers(0, TAGGER_VOCAB, WORDS), rng.integers(0, TAGS, WORDS)) for _ in range(3)]
    t_data = [(torch.from_numpy(s), torch.from_numpy(t)) for s, t in data]
    loss_function = nn.NLLLoss()
    t_opt = optim.SGD(t_model.parameters(), lr=0.1)
    r_opt = rk.SGD(learning_rate=0.1)
    weights = r_model.trainable_weights()

    def torch_step(i: int = 0) -> float:
        sentence_in, targets = t_data[i]
        t_model.zero_grad()
        tag_scores = t_model(sentence_in)
        loss = loss_function(tag_scores, targets)
        loss.backward()
        t_opt.step()
        return float(loss.item())

    def rnnkit_step(i: int = 0) -> float:
        sentence_in, targets = data[i]
        with rk.GradientTape() as tape:
            tag_scores = r_model(sentence_in)
            loss = ops.negative(ops.mean(ops.take_along_axis(tag_scores, targets[:, None], axis=1)))
        r_opt.apply_gradients(zip(tape.gradient(loss, weights), weights, strict=True))
        return float(loss)

    _check("tagger", [torch_step(i) for i in range(3)], [rnnkit_step(i) for i in range(3)])
    return {"tagger": (torch_step, rnnkit_step)}


# -- timing --------------------------------------------------------------------------------------------
def sample(f: Callable[[], object], seconds: float) -> float:
    """CPU seconds per call of ``f``: the mean of an inner loop of about ``seconds``."""
    t0 = time.process_time()
    f()
    one = max(time.process_time() - t0, 1e-6)
    n = max(1, int(seconds / one))
    t0 = time.process_time()
    for _ in range(n):
        f()
    return (time.process_time() - t0) / n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="s2s,greedy,tagger")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--sample", type=float, default=0.5, help="seconds per timed sample")
    ap.add_argument("--profile", help="a case: cProfile rnnkit's side instead of timing")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    cases: dict[str, tuple[Callable[[], object], Callable[[], object]]] = {}
    wanted = [args.profile] if args.profile else args.cases.split(",")
    if {"s2s", "greedy"} & set(wanted):
        cases.update(s2s_cases())
    if "tagger" in wanted:
        cases.update(tagger_cases())
    if args.profile:
        f = cases[args.profile][1]
        prof = cProfile.Profile()
        n = max(5, int(3.0 / sample(f, 0.3)))
        prof.enable()
        for _ in range(n):
            f()
        prof.disable()
        print(f"{n} calls of rnnkit's {args.profile} step")
        pstats.Stats(prof).sort_stats("tottime").print_stats(30)
        return 0
    targets = {"s2s": 0.8, "greedy": 1.0, "tagger": 1.0}
    print(f"one thread each; torch {torch.__version__}, rnnkit {rk.__version__}, numpy {np.__version__}")
    for name in wanted:
        t_f, r_f = cases[name]
        for _ in range(3):                         # warm both (compiles, allocator, caches)
            t_f()
            r_f()
        ts: list[float] = []
        rs: list[float] = []
        for rep in range(args.repeats):
            order = [(t_f, ts), (r_f, rs)] if rep % 2 == 0 else [(r_f, rs), (t_f, ts)]
            for f, out in order:
                out.append(sample(f, args.sample))
        t_med, r_med = statistics.median(ts), statistics.median(rs)
        print(f"{name:7s} torch {t_med * 1e3:8.3f} ms  rnnkit {r_med * 1e3:8.3f} ms  "
              f"ratio {r_med / t_med:5.2f}  (target <= {targets[name]})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
