"""lstm_character_level_text_generation in rnnkit: the port of original.py, from its initial
weights.

Lines ending in ``# harness`` are the side-by-side harness; tools/porting_report.py leaves them
out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
import json  # harness

import rnnkit as rk

import numpy as np
import random
import sys
import io

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness
path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "LICENSE")  # harness
with io.open(path, encoding="utf-8") as f:
    text = f.read().lower()
print("corpus length:", len(text))

chars = sorted(list(set(text)))
print("total chars:", len(chars))
char_indices = dict((c, i) for i, c in enumerate(chars))
indices_char = dict((i, c) for i, c in enumerate(chars))

maxlen = 20
step = 3
sentences = []
next_chars = []
for i in range(0, len(text) - maxlen, step):
    sentences.append(text[i : i + maxlen])
    next_chars.append(text[i + maxlen])
print("nb sequences:", len(sentences))

x = np.zeros((len(sentences), maxlen, len(chars)), dtype=np.bool)
y = np.zeros((len(sentences), len(chars)), dtype=np.bool)
for i, sentence in enumerate(sentences):
    for t, char in enumerate(sentence):
        x[i, t, char_indices[char]] = 1
    y[i, char_indices[next_chars[i]]] = 1

model = rk.Sequential(
    [
        rk.Input(shape=(maxlen, len(chars))),
        rk.LSTM(32),
        rk.Dense(len(chars), activation="softmax"),
    ]
)
optimizer = rk.optimizers.RMSprop(learning_rate=0.01, formula="keras")
model.compile(loss="categorical_crossentropy", optimizer=optimizer)
rk.load_keras_weights(model, os.path.join(OUT, "charlm.weights.h5"))  # harness


def sample(preds, temperature=1.0):
    preds = np.asarray(preds).astype("float64")
    preds = np.log(preds) / temperature
    exp_preds = np.exp(preds)
    preds = exp_preds / np.sum(exp_preds)
    probas = np.random.multinomial(1, preds, 1)
    return np.argmax(probas)


epochs = 2 if TINY else 3
batch_size = 32
losses = []  # harness
random.seed(0)  # harness

for epoch in range(epochs):
    history = model.fit(x, y, batch_size=batch_size, epochs=1, shuffle=False)
    losses += history.history["loss"]  # harness

    print("Generating text after epoch: %d" % epoch)

    start_index = random.randint(0, len(text) - maxlen - 1)
    for diversity in [0.5, 1.0]:
        print("----- diversity:", diversity)

        generated = ""
        sentence = text[start_index : start_index + maxlen]
        generated += sentence
        print('----- Generating with seed: "' + sentence + '"')
        sys.stdout.write(generated)

        for i in range(40):
            x_pred = np.zeros((1, maxlen, len(chars)))
            for t, char in enumerate(sentence):
                x_pred[0, t, char_indices[char]] = 1.0

            preds = model.predict(x_pred, verbose=0)[0]
            next_index = sample(preds, diversity)
            next_char = indices_char[next_index]

            sentence = sentence[1:] + next_char

            sys.stdout.write(next_char)
            sys.stdout.flush()
        print()

with open(os.path.join(OUT, "charlm.port.json"), "w") as fh:  # harness
    json.dump(losses, fh)  # harness
