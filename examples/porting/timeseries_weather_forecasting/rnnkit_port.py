"""timeseries_weather_forecasting in rnnkit: the port of original.py, from its initial weights.

Lines ending in ``# harness`` are the side-by-side harness; tools/porting_report.py leaves them
out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness

import json  # harness

import numpy as np
import pandas as pd
import rnnkit as rk

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness
ROWS = 700 if TINY else 1600  # harness


def windows(data, targets, sequence_length, sampling_rate):  # harness
    span = (sequence_length - 1) * sampling_rate + 1  # harness
    n = min(len(data) - span + 1, len(targets))  # harness
    idx = np.arange(n)[:, None] + np.arange(0, span, sampling_rate)[None, :]  # harness
    return data[idx].astype("float32"), np.asarray(targets)[:n].astype("float32")  # harness


rng = np.random.default_rng(0)  # harness
t = np.arange(ROWS)  # harness
raw = np.stack([np.sin(2 * np.pi * t / (144 * (k + 1)) + k) * (k + 1) + rng.normal(0, 0.3, ROWS) for k in range(7)], 1)  # harness
df = pd.DataFrame(raw)  # harness

split_fraction = 0.715
train_split = int(split_fraction * int(df.shape[0]))
step = 6

past = 120
future = 12
learning_rate = 0.001
batch_size = 64
epochs = 2


def normalize(data, train_split):
    data_mean = data[:train_split].mean(axis=0)
    data_std = data[:train_split].std(axis=0)
    return (data - data_mean) / data_std


features = normalize(df.values, train_split)
features = pd.DataFrame(features)

train_data = features.loc[0 : train_split - 1]
val_data = features.loc[train_split:]

start = past + future
end = start + train_split

x_train = train_data[[i for i in range(7)]].values
y_train = features.iloc[start:end][[1]]

sequence_length = int(past / step)

x_train_w, y_train_w = windows(x_train, y_train.values, sequence_length, step)  # harness

x_end = len(val_data) - past - future

label_start = train_split + past + future

x_val = val_data.iloc[:x_end][[i for i in range(7)]].values
y_val = features.iloc[label_start:][[1]]

x_val_w, y_val_w = windows(x_val, y_val.values, sequence_length, step)  # harness

inputs = rk.Input(shape=(x_train_w.shape[1], x_train_w.shape[2]))
lstm_out = rk.LSTM(32)(inputs)
outputs = rk.Dense(1)(lstm_out)

model = rk.Model(inputs=inputs, outputs=outputs)
model.compile(optimizer=rk.optimizers.Adam(learning_rate=learning_rate, formula="keras"), loss="mse")
model.summary()
rk.load_keras_weights(model, os.path.join(OUT, "weather.weights.h5"))  # harness

path_checkpoint = os.path.join(OUT, "model_checkpoint.weights.h5")
es_callback = rk.callbacks.EarlyStopping(monitor="val_loss", min_delta=0, patience=5)

modelckpt_callback = rk.callbacks.ModelCheckpoint(
    monitor="val_loss",
    filepath=path_checkpoint,
    verbose=1,
    save_weights_only=True,
    save_best_only=True,
)

history = model.fit(
    x_train_w, y_train_w, batch_size=batch_size, shuffle=False,
    epochs=epochs,
    validation_data=(x_val_w, y_val_w),
    callbacks=[es_callback, modelckpt_callback],
)

print(model.predict(x_val_w[:5], verbose=0)[:, 0])

with open(os.path.join(OUT, "weather.port.json"), "w") as fh:  # harness
    json.dump(history.history["loss"], fh)  # harness
