"""time_sequence_prediction (pytorch/examples), trimmed: 24 shorter sine waves made as
generate_sine_wave.py makes them, 3 optimizer steps, no plots.

The example trains with LBFGS; rnnkit has no LBFGS, so for the side-by-side curve both files
also run Adam (``PORTING_OPTIM=adam``). Lines ending in ``# harness`` are the harness;
tools/porting_report.py leaves them out of the edit count.
"""

import os  # harness

os.environ.setdefault("OMP_NUM_THREADS", "1")  # harness
import json  # harness

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from safetensors.torch import save_file  # harness

OUT = os.environ.get("PORTING_OUT", ".")  # harness
TINY = os.environ.get("PORTING_TINY") == "1"  # harness
OPTIM = os.environ.get("PORTING_OPTIM", "lbfgs")  # harness
STEPS = (2 if TINY else 3) if OPTIM == "lbfgs" else (5 if TINY else 20)  # harness


class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


np.random.seed(2)
T, L, N = 20, (60 if TINY else 200), 24  # harness: generate_sine_wave.py has L=1000, N=100
x = np.empty((N, L), "int64")
x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = np.sin(x / 1.0 / T).astype("float64")

np.random.seed(0)
torch.manual_seed(0)
data = torch.from_numpy(data)
input = data[3:, :-1]
target = data[3:, 1:]
test_input = data[:3, :-1]
test_target = data[:3, 1:]
seq = Sequence().double()
save_file({k: v.contiguous() for k, v in seq.state_dict().items()}, os.path.join(OUT, "sine.safetensors"))  # harness
criterion = nn.MSELoss()
optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
if OPTIM == "adam":  # harness
    optimizer = optim.Adam(seq.parameters(), lr=0.01)  # harness
losses = []  # harness
for i in range(STEPS):
    print("STEP: ", i)

    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        print("loss:", loss.item())
        losses.append(loss.item())  # harness
        loss.backward()
        return loss

    optimizer.step(closure)
    with torch.no_grad():
        future = 100
        pred = seq(test_input, future=future)
        loss = criterion(pred[:, :-future], test_target)
        print("test loss:", loss.item())
        y = pred.detach().numpy()

with open(os.path.join(OUT, "sine.original.json"), "w") as fh:  # harness
    json.dump(losses, fh)  # harness
