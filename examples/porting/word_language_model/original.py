"""word_language_model (pytorch/examples: model.py and main.py), trimmed: the corpus is this
repository's LICENSE and README (they ship with the code) instead of Wikitext-2; a 2-layer LSTM
of 16 units, bptt 10, one epoch, dropout 0 (dropout draws differ between the libraries; the
example's default is 0.2), untied weights.

Lines ending in ``# harness`` are the side-by-side harness; tools/porting_report.py leaves them
out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
import json  # harness

import torch
import torch.nn as nn
import torch.nn.functional as F
from safetensors.torch import save_file  # harness

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..")  # harness


class RNNModel(nn.Module):
    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.init_weights()
        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                weight.new_zeros(self.nlayers, bsz, self.nhid))


words = []  # harness: data.Corpus, in a few lines
for name in ("LICENSE", "README.md"):  # harness
    with open(os.path.join(ROOT, name), encoding="utf-8") as f:  # harness
        words += [w for line in f for w in line.split() + ["<eos>"]]  # harness
idx = {w: i for i, w in enumerate(dict.fromkeys(words))}  # harness
ids = torch.tensor([idx[w] for w in words][: 1200 if TINY else 4000], dtype=torch.int64)  # harness


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data


bptt = 10
lr = 20
clip = 0.25
torch.manual_seed(1111)
train_data = batchify(ids, 8)
ntokens = len(idx)
model = RNNModel("LSTM", ntokens, 16, 16, 2, 0.0, False)
save_file({k: v.contiguous() for k, v in model.state_dict().items()}, os.path.join(OUT, "wlm.safetensors"))  # harness
criterion = nn.NLLLoss()


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i : i + seq_len]
    target = source[i + 1 : i + 1 + seq_len].view(-1)
    return data, target


losses = []  # harness
model.train()
hidden = model.init_hidden(8)
for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
    data, targets = get_batch(train_data, i)
    model.zero_grad()
    hidden = repackage_hidden(hidden)
    output, hidden = model(data, hidden)
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    losses.append(loss.item())  # harness
print("loss", losses[0], "->", losses[-1])

with open(os.path.join(OUT, "wlm.original.json"), "w") as fh:  # harness
    json.dump(losses, fh)  # harness
