"""bidirectional_lstm_imdb in rnnkit before the functional API (commit fe52040): the
port of original.py, from its initial weights.

Lines ending in ``# harness`` are the side-by-side harness; tools/porting_report.py leaves them
out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
import json  # harness

import numpy as np
import rnnkit as rk

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness

max_features = 2000
maxlen = 40

g = rk.GraphBuilder()
inputs = g.input((None, None))
x = g.add(rk.Embedding(max_features, 16), inputs)
x = g.add(rk.Bidirectional(rk.LSTM(8, return_sequences=True)), x)
x = g.add(rk.Bidirectional(rk.LSTM(8)), x)
outputs = g.add(rk.Dense(1, activation="sigmoid"), x)
model = g.build(outputs)
model.summary()


def reviews(n, rng):  # harness
    lengths = rng.integers(10, 80, n)  # harness
    seqs = [list(rng.integers(3, max_features, k)) for k in lengths]  # harness
    labels = np.array([int(sum(t < 200 for t in s) > 0.1 * len(s)) for s in seqs])  # harness
    return seqs, labels  # harness


rng = np.random.default_rng(0)  # harness
(x_train, y_train), (x_val, y_val) = reviews(128 if TINY else 320, rng), reviews(64, rng)  # harness
print(len(x_train), "Training sequences")
print(len(x_val), "Validation sequences")
def pad_sequences(seqs, maxlen):
    out = np.zeros((len(seqs), maxlen), "int32")
    for i, s in enumerate(seqs):
        s = list(s)[-maxlen:]
        if s:
            out[i, -len(s):] = s
    return out


x_train = pad_sequences(x_train, maxlen=maxlen)
x_val = pad_sequences(x_val, maxlen=maxlen)
y_train, y_val = y_train[:, None], y_val[:, None]

model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
import h5py  # harness

keys = ["embedding/vars/0"] + [f"{b}/{d}_layer/cell/vars/{i}" for b in ("bidirectional", "bidirectional_1") for d in ("forward", "backward") for i in range(3)] + ["dense/vars/0", "dense/vars/1"]  # harness
with h5py.File(os.path.join(OUT, "imdb.weights.h5"), "r") as f:  # harness
    for (layer, name), key in zip(model.named_weights().values(), keys):  # harness
        layer.set_weight(name, f["layers/" + key][()].reshape(layer.weight(name).shape))  # harness
history = model.fit(x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), shuffle=False)

with open(os.path.join(OUT, "imdb.port_before.json"), "w") as fh:  # harness
    json.dump(history.history["loss"], fh)  # harness
