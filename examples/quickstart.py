"""Train one LSTM + a linear readout on the pages' sum-of-3 task with plain SGD, by hand.

Shows the layer API alone: build, forward in a training Ctx, backward, the gradient store.
"""

import numpy as np

import rnnkit as rk

x = np.array([[0.1, 0.2, 0.1], [0.3, 0.1, 0.2], [0.0, 0.2, 0.2], [0.2, 0.2, 0.1]])[..., None]
y = x.sum(axis=(1, 2))[:, None]

lstm = rk.LSTM(16, rk.Tanh(), seed=42, dtype="float64")
lstm.build(rk.Shape.with_free_batch(x.shape))
w_out = np.zeros((16, 1))
b_out = np.zeros(1)

for epoch in range(3000):
    ctx = rk.Ctx.training()
    h = lstm.forward(x, ctx)
    pred = h @ w_out + b_out
    dpred = 2 * (pred - y) / len(y)          # d(MSE)/d(pred)
    lstm.backward(dpred @ w_out.T, ctx)
    w_out -= 0.5 * h.T @ dpred
    b_out -= 0.5 * dpred.sum(0)
    for entry in lstm.weights():
        lstm.set_weight(entry.name, entry.value - 0.5 * ctx.grad(lstm, entry.name))

pred = lstm.predict(x) @ w_out + b_out
print("target     :", y.ravel().round(3))
print("prediction :", pred.ravel().round(3))
