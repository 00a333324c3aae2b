"""bidirectional_lstm_imdb (keras-io examples/nlp), trimmed: generated IMDB-like reviews (token
ids of varying length whose label depends on which words occur) instead of the IMDB download,
a smaller vocabulary, embedding and LSTMs.

Lines ending in ``# harness`` are the side-by-side harness; tools/porting_report.py leaves them
out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
os.environ.setdefault("KERAS_BACKEND", "torch")  # harness
import json  # harness

import numpy as np
import keras
from keras import layers

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness

max_features = 2000
maxlen = 40

inputs = keras.Input(shape=(None,), dtype="int32")
x = layers.Embedding(max_features, 16)(inputs)
x = layers.Bidirectional(layers.LSTM(8, return_sequences=True))(x)
x = layers.Bidirectional(layers.LSTM(8))(x)
outputs = layers.Dense(1, activation="sigmoid")(x)
model = keras.Model(inputs, outputs)
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
x_train = keras.utils.pad_sequences(x_train, maxlen=maxlen)
x_val = keras.utils.pad_sequences(x_val, maxlen=maxlen)

model.compile(optimizer="adam", loss="binary_crossentropy", metrics=["accuracy"])
model.save_weights(os.path.join(OUT, "imdb.weights.h5"))  # harness
history = model.fit(x_train, y_train, batch_size=32, epochs=2, validation_data=(x_val, y_val), shuffle=False)

with open(os.path.join(OUT, "imdb.original.json"), "w") as fh:  # harness
    json.dump(history.history["loss"], fh)  # harness
