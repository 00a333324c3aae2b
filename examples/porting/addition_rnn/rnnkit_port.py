"""addition_rnn in rnnkit: the port of original.py, from its initial weights.

Lines ending in ``# harness`` are the side-by-side harness (sizes, seeds, initial weights,
loss record); tools/porting_report.py leaves them out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness

import json  # harness

import rnnkit as rk
import numpy as np

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness

# Parameters for the model and dataset.
TRAINING_SIZE = 200 if TINY else 600  # harness
DIGITS = 3
REVERSE = True

# Maximum length of input is 'int + int' (e.g., '345+678').
MAXLEN = DIGITS + 1 + DIGITS


class CharacterTable:
    """One-hot encoding and decoding of a fixed character set."""

    def __init__(self, chars):
        self.chars = sorted(set(chars))
        self.char_indices = dict((c, i) for i, c in enumerate(self.chars))
        self.indices_char = dict((i, c) for i, c in enumerate(self.chars))

    def encode(self, C, num_rows):
        x = np.zeros((num_rows, len(self.chars)))
        for i, c in enumerate(C):
            x[i, self.char_indices[c]] = 1
        return x

    def decode(self, x, calc_argmax=True):
        if calc_argmax:
            x = x.argmax(axis=-1)
        return "".join(self.indices_char[x] for x in x)


chars = "0123456789+ "
ctable = CharacterTable(chars)

np.random.seed(0)  # harness
questions = []
expected = []
seen = set()
while len(questions) < TRAINING_SIZE:
    f = lambda: int(
        "".join(
            np.random.choice(list("0123456789"))
            for i in range(np.random.randint(1, DIGITS + 1))
        )
    )
    a, b = f(), f()
    key = tuple(sorted((a, b)))
    if key in seen:
        continue
    seen.add(key)
    q = "{}+{}".format(a, b)
    query = q + " " * (MAXLEN - len(q))
    ans = str(a + b)
    ans += " " * (DIGITS + 1 - len(ans))
    if REVERSE:
        query = query[::-1]
    questions.append(query)
    expected.append(ans)

x = np.zeros((len(questions), MAXLEN, len(chars)), dtype=np.bool)
y = np.zeros((len(questions), DIGITS + 1, len(chars)), dtype=np.bool)
for i, sentence in enumerate(questions):
    x[i] = ctable.encode(sentence, MAXLEN)
for i, sentence in enumerate(expected):
    y[i] = ctable.encode(sentence, DIGITS + 1)

indices = np.arange(len(y))
np.random.shuffle(indices)
x = x[indices]
y = y[indices]

split_at = len(x) - len(x) // 10
(x_train, x_val) = x[:split_at], x[split_at:]
(y_train, y_val) = y[:split_at], y[split_at:]

num_layers = 1
HIDDEN = 32  # harness: 128 in the example

model = rk.Sequential()
model.add(rk.LSTM(HIDDEN, input_shape=(MAXLEN, len(chars))))
model.add(rk.RepeatVector(DIGITS + 1))
for _ in range(num_layers):
    model.add(rk.LSTM(HIDDEN, return_sequences=True))
model.add(rk.Dense(len(chars), activation="softmax"))
model.compile(loss="categorical_crossentropy", optimizer=rk.Adam(formula="keras"), metrics=["accuracy"])
model.summary()
rk.load_keras_weights(model, os.path.join(OUT, "addition_rnn.weights.h5"))  # harness

epochs = 3 if TINY else 4  # harness
batch_size = 32
losses = []  # harness

for epoch in range(1, epochs):
    print()
    print("Iteration", epoch)
    history = model.fit(
        x_train,
        y_train,
        batch_size=batch_size,
        epochs=1,
        validation_data=(x_val, y_val),
        shuffle=False,
    )
    losses += history.history["loss"]  # harness
    for i in range(3):
        ind = np.random.randint(0, len(x_val))
        rowx, rowy = x_val[np.array([ind])], y_val[np.array([ind])]
        preds = np.argmax(model.predict(rowx, verbose=0), axis=-1)
        q = ctable.decode(rowx[0])
        correct = ctable.decode(rowy[0])
        guess = ctable.decode(preds[0], calc_argmax=False)
        print("Q", q[::-1] if REVERSE else q, end=" ")
        print("T", correct, end=" ")
        print(("☑ " if correct == guess else "☒ ") + guess)

with open(os.path.join(OUT, "addition_rnn.port.json"), "w") as fh:  # harness
    json.dump(losses, fh)  # harness
