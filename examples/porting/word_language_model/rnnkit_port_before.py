"""word_language_model in rnnkit before the functional API (commit fe52040): the port of
original.py (model.py and main.py), from its
initial weights.

The model keeps PyTorch's structure: an ``Embedding``, a time-major ``rnnkit.rnn.lstm`` with
PyTorch's parameter names and two biases, a ``Dense`` decoder; the forward and backward passes
and the log-softmax / NLL gradient are written out, as rnnkit has no autograd. Lines ending
in ``# harness`` are the harness; tools/porting_report.py leaves them out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
import json  # harness

import numpy as np
import rnnkit as rk
from rnnkit import rnn
from safetensors.numpy import load_file  # harness

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")  # harness


class RNNModel:
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        self.ntoken = ntoken
        self.encoder = rk.Embedding(ntoken, ninp)
        self.encoder.build((None, None))
        self.rnn = rnn.lstm(ninp, nhid, rnn.RNNConfig(num_layers=nlayers, batch_first=False, dropout=dropout))
        self.decoder = rk.Dense(ntoken)
        self.decoder.build((None, None, nhid))
        self.nhid = nhid
        self.nlayers = nlayers

    def forward(self, input, hidden, ctx):
        emb = self.encoder.forward(input, ctx)
        output, hidden = self.rnn.seq_init(emb, hidden, ctx)
        decoded = self.decoder.forward(output, ctx)
        decoded = decoded.reshape(-1, self.ntoken)
        logp = decoded - decoded.max(1, keepdims=True)
        return logp - np.log(np.exp(logp).sum(1, keepdims=True)), hidden

    def backward(self, grad, ctx):
        d_out = self.decoder.backward(grad.reshape(-1, 8, self.ntoken), ctx)
        d_emb, _ = self.rnn.backward((d_out, None), ctx)
        self.encoder.backward(d_emb, ctx)

    def init_hidden(self, bsz):
        return self.rnn.zero_state(bsz)


words = []  # harness: data.Corpus, in a few lines
for name in ("LICENSE", "README.md"):  # harness
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:  # harness
        words += [w for line in f for w in line.split() + ["<eos>"]]  # harness
idx = {w: i for i, w in enumerate(dict.fromkeys(words))}  # harness
ids = np.array([idx[w] for w in words][: 1200 if TINY else 4000], dtype=np.int64)  # harness


def batchify(data, bsz):
    nbatch = data.shape[0] // bsz
    data = data[: nbatch * bsz]
    data = np.ascontiguousarray(data.reshape(bsz, -1).T)
    return data


bptt = 10
lr = 20
clip = 0.25
train_data = batchify(ids, 8)
ntokens = len(idx)
model = RNNModel("LSTM", ntokens, 16, 16, 2, 0.0, False)
state = load_file(os.path.join(OUT, "wlm.safetensors"))  # harness
model.encoder.set_weight("embeddings", state["encoder.weight"])  # harness
model.rnn.load_state_dict({k[4:]: v for k, v in state.items() if k.startswith("rnn.")})  # harness
model.decoder.set_weight("kernel", state["decoder.weight"].T)  # harness
model.decoder.set_weight("bias", state["decoder.bias"].reshape(model.decoder.weight("bias").shape))  # harness
optimizer = rk.SGD(learning_rate=lr, global_clipnorm=clip)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].reshape(-1)
    return data, target


losses = []  # harness
hidden = model.init_hidden(8)
for batch, i in enumerate(range(0, train_data.shape[0] - 1, bptt)):
    data, targets = get_batch(train_data, i)
    ctx = rk.Ctx.training()
    output, hidden = model.forward(data, hidden, ctx)
    loss = float(-output[np.arange(len(targets)), targets].mean())
    grad = np.exp(output)
    grad[np.arange(len(targets)), targets] -= 1
    model.backward(grad / len(targets), ctx)
    optimizer.apply_gradients([(layer, name, g) for (layer, name), g in ctx.grads.items()])
    losses.append(loss)  # harness
print("loss", losses[0], "->", losses[-1])

with open(os.path.join(OUT, "wlm.port_before.json"), "w") as fh:  # harness
    json.dump(losses, fh)  # harness
