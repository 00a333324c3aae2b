"""bidirectional_lstm_imdb in rnnkit: the port of original.py, from its initial weights.

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

inputs = rk.Input(shape=(None,), dtype="int32")
x = rk.Embedding(max_features, 16)(inputs)
x = rk.Bidirectional(rk.LSTM(8, return_sequences=True))(x)
x = rk.Bidirectional(rk.LSTM(8))(x)
outputs = rk.Dense(1, activation="sigmoid")(x)
model = rk.Model(inputs, outputs)
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
x_train = rk.data.pad_sequences(x_train, maxlen=maxlen)
x_val = rk.data.pad_sequences(x_val, maxlen=maxlen)

model.compile(optimizer=rk.Adam(formula="keras"), loss="binary_crossentropy", metrics=["accuracy"])
rk.load_keras_weights(model, os.path.join(OUT, "imdb.weights.h5"))  # harness
history = model.fit(x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), shuffle=False)

with open(os.path.join(OUT, "imdb.port.json"), "w") as fh:  # harness
    json.dump(history.history["loss"], fh)  # harness
