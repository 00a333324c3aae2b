"""time_sequence_prediction in rnnkit before the functional API (commit fe52040): the port
of original.py, from its initial weights.

Two stacked ``nn.LSTMCell`` are one two-layer PyTorch LSTM: ``rnnkit.rnn.lstm(1, 51,
RNNConfig(num_layers=2))`` with the same parameter names. rnnkit has no LBFGS: with the
default optimizer this file trains with Adam too. Lines ending in ``# harness`` are the
harness; tools/porting_report.py leaves them out of the edit count.
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
OPTIM = os.environ.get("PORTING_OPTIM", "lbfgs")  # harness
STEPS = (2 if TINY else 3) if OPTIM == "lbfgs" else (5 if TINY else 20)  # harness


class Sequence:
    def __init__(self):
        self.lstm = rnn.lstm(1, 51, rnn.RNNConfig(num_layers=2), dtype="float64")
        self.linear = rk.Dense(1, dtype="float64")
        self.linear.build((None, None, 51))

    def forward(self, input, ctx, future=0):
        h = self.lstm.forward(input[:, :, None], ctx)
        outputs = self.linear.forward(h, ctx)[:, :, 0]
        if future:
            _, state = self.lstm.seq(input[:, :, None])
            output = outputs[:, -1:]
            extra = []
            for i in range(future):
                state = self.lstm.step(output, state)
                output = self.linear.predict(state.h[-1])
                extra += [output]
            outputs = np.concatenate([outputs, *extra], axis=1)
        return outputs

    def backward(self, grad, ctx):
        self.lstm.backward(self.linear.backward(grad[:, :, None], ctx), ctx)


np.random.seed(2)
T, L, N = 20, (60 if TINY else 200), 24  # harness: generate_sine_wave.py has L=1000, N=100
x = np.empty((N, L), "int64")
x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = np.sin(x / 1.0 / T).astype("float64")

np.random.seed(0)
input = data[3:, :-1]
target = data[3:, 1:]
test_input = data[:3, :-1]
test_target = data[:3, 1:]
seq = Sequence()
state = load_file(os.path.join(OUT, "sine.safetensors"))  # harness
seq.lstm.load_state_dict({k.replace("lstm1.", "").replace("lstm2.", "") + ("_l0" if "lstm1" in k else "_l1"): v for k, v in state.items() if "lstm" in k})  # harness
seq.linear.set_weight("kernel", state["linear.weight"].T)  # harness
seq.linear.set_weight("bias", state["linear.bias"].reshape(seq.linear.weight("bias").shape))  # harness
optimizer = rk.Adam(learning_rate=0.01, epsilon=1e-8)
losses = []  # harness
for i in range(STEPS):
    print("STEP: ", i)
    ctx = rk.Ctx.training()
    out = seq.forward(input, ctx)
    loss = float(((out - target) ** 2).mean())
    print("loss:", loss)
    losses.append(loss)  # harness
    seq.backward(2 * (out - target) / out.size, ctx)
    optimizer.apply_gradients([(layer, name, g) for (layer, name), g in ctx.grads.items()])
    pred = seq.forward(test_input, rk.Ctx.inference(), future=100)
    loss = float(((pred[:, :-100] - test_target) ** 2).mean())
    print("test loss:", loss)
    y = pred

with open(os.path.join(OUT, "sine.port_before.json"), "w") as fh:  # harness
    json.dump(losses, fh)  # harness
