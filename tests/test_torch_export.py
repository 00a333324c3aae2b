"""PyTorch export round trips: a torch module's state dict -> ``load_torch_rnn`` ->
``save_torch_safetensors`` -> ``torch.nn.*.load_state_dict`` (strict, the file as it is) gives
the identical state dict, for LSTM (with ``proj_size``, no bias), GRU and ``nn.RNN`` stacks,
one and two directions; single layers the same way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

IN, H = 3, 5
CASES = [
    ("LSTM", {"num_layers": 2, "bidirectional": True, "proj_size": 2}),
    ("LSTM", {"num_layers": 1, "bias": False, "proj_size": 3}),
    ("LSTM", {"num_layers": 3, "bidirectional": False}),
    ("GRU", {"num_layers": 2, "bidirectional": True}),
    ("GRU", {"num_layers": 1, "bias": False}),
    ("RNN", {"num_layers": 3, "bidirectional": True, "nonlinearity": "relu"}),
    ("RNN", {"num_layers": 2, "nonlinearity": "tanh"}),
]


@pytest.mark.parametrize("cls,kw", CASES, ids=[f"{c}-{'-'.join(f'{k}{v}' for k, v in kw.items())}"
                                               for c, kw in CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_torch_rnnkit_torch_identical_state_dicts(cls: str, kw: dict[str, Any], dtype: Any,
                                                  tmp_path: Path) -> None:
    torch.manual_seed(0)
    mod = getattr(torch.nn, cls)(IN, H, batch_first=True, **kw).to(dtype)
    with torch.no_grad():
        for p in mod.parameters():
            p.uniform_(-0.7, 0.7)
    st_torch.save_file(mod.state_dict(), tmp_path / "in.safetensors")
    net = rk.load_torch_rnn(tmp_path / "in.safetensors", batch_first=True,
                            nonlinearity=kw.get("nonlinearity", "tanh"))
    rk.save_torch_safetensors(net, tmp_path / "out.safetensors", prefix="rnn.")
    back = st_torch.load_file(tmp_path / "out.safetensors")
    again = getattr(torch.nn, cls)(IN, H, batch_first=True, **kw).to(dtype)
    again.load_state_dict({k[len("rnn."):]: v for k, v in back.items()})   # strict
    want, got = mod.state_dict(), again.state_dict()
    assert list(got) == list(want)
    for k in want:
        assert got[k].dtype == want[k].dtype and torch.equal(got[k], want[k]), k
    x = torch.randn(2, 4, IN, dtype=dtype)
    out, _ = net.seq(x.numpy())
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    np.testing.assert_allclose(again(x)[0].detach().numpy(), out, atol=tol, rtol=0)


@pytest.mark.parametrize("layer,module", [
    (lambda: rk.LSTM(H, proj_size=2), lambda: torch.nn.LSTM(IN, H, proj_size=2, batch_first=True)),
    (lambda: rk.GRU(H, reset_after=True, use_bias=False),
     lambda: torch.nn.GRU(IN, H, bias=False, batch_first=True)),
    (lambda: rk.SimpleRNN(H, "relu"), lambda: torch.nn.RNN(IN, H, nonlinearity="relu", batch_first=True)),
], ids=["lstm-proj", "gru-nobias", "rnn-relu"])
def test_single_layer_to_torch(layer: Any, module: Any, tmp_path: Path) -> None:
    lay = layer()
    lay.build(rk.Shape((None, None, IN)))
    rng = np.random.default_rng(3)
    for n in lay.weight_names:
        lay.set_weight(n, rng.normal(0, 0.5, lay.weight(n).shape).astype(np.float32))
    lay.return_sequences = True
    rk.save_torch_safetensors(lay, tmp_path / "l.safetensors")
    mod = module()
    mod.load_state_dict(st_torch.load_file(tmp_path / "l.safetensors"))
    x = rng.normal(size=(2, 5, IN)).astype(np.float32)
    np.testing.assert_allclose(mod(torch.from_numpy(x))[0].detach().numpy(), lay.predict(x),
                               atol=1e-5, rtol=0)


def test_torch_refusals(tmp_path: Path) -> None:
    gru = rk.GRU(3, reset_after=False, input_dim=2)
    with pytest.raises(rk.InvalidParameterError, match="reset_after=True"):
        rk.save_torch_safetensors(gru, tmp_path / "g.safetensors")
    lstm = rk.LSTM(3, recurrent_activation="hard_sigmoid", input_dim=2)
    with pytest.raises(rk.InvalidParameterError, match="recurrent_activation 'hard_sigmoid'"):
        rk.save_torch_safetensors(lstm, tmp_path / "l.safetensors")
    back = rk.LSTM(3, go_backwards=True, input_dim=2, name="back")
    with pytest.raises(rk.UnsupportedFeatureError, match="layer 'back': go_backwards: a one-direction"):
        rk.save_torch_safetensors(back, tmp_path / "b.safetensors")
    assert not list(tmp_path.iterdir())
