"""PyTorch LSTM/GRU networks through safetensors files (rnnkit.io.load_torch_rnn,
load_torch_safetensors, save_torch_safetensors), against live torch 2.13.0: a module's
state dict written with safetensors.torch.save_file loads into an RNNNet that gives torch's
outputs and final states; rnnkit's file loads into torch; torch.save pickles are refused
unread."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import rnnkit as rk

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

ATOL = 1e-6
IN, H, B, T = 3, 5, 4, 6


def _module(mode: str, layers: int, bi: bool, bias: bool = True, batch_first: bool = False,
            seed: int = 0) -> Any:
    torch.manual_seed(seed)
    cls = torch.nn.LSTM if mode == "lstm" else torch.nn.GRU
    m = cls(IN, H, num_layers=layers, bidirectional=bi, bias=bias, batch_first=batch_first)
    with torch.no_grad():  # larger than the default init, so every weight matters
        for p in m.parameters():
            p.uniform_(-0.7, 0.7)
    return m.eval()


def _compare(m: Any, net: rk.rnn.RNNNet, mode: str, batch_first: bool) -> float:
    shape = (B, T, IN) if batch_first else (T, B, IN)
    x = np.random.default_rng(1).normal(size=shape).astype("float32")
    with torch.no_grad():
        y, st = m(torch.from_numpy(x))
    out, state = net.seq(x)
    ts = (st[0], st[1]) if mode == "lstm" else (st,)
    ours = (state.h, state.c) if mode == "lstm" else (state.h,)
    diffs = [float(np.abs(y.numpy() - out).max())]
    diffs += [float(np.abs(t.numpy() - o).max()) for t, o in zip(ts, ours, strict=True)]
    assert out.shape == tuple(y.shape)
    return max(diffs)


@pytest.mark.parametrize("mode", ["lstm", "gru"])
@pytest.mark.parametrize("layers, bi", [(1, False), (2, False), (1, True), (2, True)])
def test_torch_file_loads_and_matches(tmp_path: Path, mode: str, layers: int, bi: bool) -> None:
    m = _module(mode, layers, bi)
    st_torch.save_file(m.state_dict(), tmp_path / "m.safetensors")
    net = rk.load_torch_rnn(tmp_path / "m.safetensors")
    assert (net.mode, net.in_dim, net.hidden_dim) == (mode, IN, H)
    c = net.config
    assert (c.num_layers, c.bidirectional, c.has_biases, c.batch_first) == (layers, bi, True, False)
    assert _compare(m, net, mode, batch_first=False) <= ATOL


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_nested_module_without_bias_batch_first(tmp_path: Path, mode: str) -> None:
    m = _module(mode, 2, True, bias=False, batch_first=True, seed=3)
    outer = torch.nn.Module()
    outer.rnn = m
    outer.head = torch.nn.Linear(2 * H, 1)
    st_torch.save_file(outer.state_dict(), tmp_path / "outer.safetensors")
    with pytest.raises(rk.InvalidInputError, match=r"prefix= \['rnn\.'\]"):
        rk.load_torch_rnn(tmp_path / "outer.safetensors")
    net = rk.load_torch_rnn(tmp_path / "outer.safetensors", prefix="rnn.", batch_first=True)
    assert not net.config.has_biases
    assert _compare(m, net, mode, batch_first=True) <= ATOL


@pytest.mark.parametrize("mode", ["lstm", "gru"])
def test_save_for_torch(tmp_path: Path, mode: str) -> None:
    cfg = rk.rnn.RNNConfig(num_layers=2, bidirectional=True, batch_first=False,
                           b_ih_init=rk.rnn.Init.uniform(-0.5, 0.5), b_hh_init=rk.rnn.Init.uniform(-0.5, 0.5))
    net = (rk.rnn.lstm if mode == "lstm" else rk.rnn.gru)(IN, H, cfg, seed=11)
    path = tmp_path / "ours.safetensors"
    rk.save_torch_safetensors(net, path, prefix="enc.")
    m = _module(mode, 2, True, seed=99)  # different weights until loaded
    state = st_torch.load_file(path)
    m.load_state_dict({k[len("enc."):]: v for k, v in state.items()}, strict=True)
    assert _compare(m, net, mode, batch_first=False) <= ATOL
    # and the file round-trips into rnnkit bit for bit
    again = rk.load_torch_rnn(path, prefix="enc.")
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(again.state_dict()[k], v)


def test_save_single_layer_for_torch(tmp_path: Path) -> None:
    layer = rk.GRU(H, reset_after=True, return_sequences=True, input_dim=IN, seed=2)
    rk.save_torch_safetensors(layer, tmp_path / "g.safetensors")
    m = torch.nn.GRU(IN, H, batch_first=True)
    m.load_state_dict(st_torch.load_file(tmp_path / "g.safetensors"))
    x = np.random.default_rng(4).normal(size=(B, T, IN)).astype("float32")
    with torch.no_grad():
        y, _ = m(torch.from_numpy(x))
    assert np.abs(y.numpy() - layer.predict(x)).max() <= ATOL


def test_float64_file_stays_float64(tmp_path: Path) -> None:
    m = _module("lstm", 1, False).double()
    st_torch.save_file(m.state_dict(), tmp_path / "d.safetensors")
    net = rk.load_torch_rnn(tmp_path / "d.safetensors")
    assert net.dtype == np.float64
    x = np.random.default_rng(5).normal(size=(T, B, IN))
    with torch.no_grad():
        y, _ = m(torch.from_numpy(x))
    assert np.abs(y.numpy() - net.seq(x)[0]).max() <= 1e-12


def test_load_torch_safetensors_gives_numpy(tmp_path: Path) -> None:
    m = _module("gru", 1, False)
    st_torch.save_file(m.state_dict(), tmp_path / "g.safetensors")
    arrays = rk.load_torch_safetensors(tmp_path / "g.safetensors")
    assert set(arrays) == {"weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"}
    np.testing.assert_array_equal(arrays["weight_hh_l0"], m.weight_hh_l0.detach().numpy())


# -- refusals ----------------------------------------------------------------------------------

class _Boom:
    """Unpickling this would create a file: proof that nothing was unpickled."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (open, (self.marker, "w"))


@pytest.mark.parametrize("legacy", [False, True])
def test_torch_save_files_are_refused_unread(tmp_path: Path, legacy: bool) -> None:
    marker = tmp_path / "unpickled.txt"
    path = tmp_path / "m.pt"
    torch.save({"state": _module("lstm", 1, False).state_dict(), "boom": _Boom(str(marker))}, path,
               _use_new_zipfile_serialization=not legacy)
    what = "Python pickle" if legacy else "torch.save file"
    for fn in (rk.load_torch_rnn, rk.load_torch_safetensors):
        with pytest.raises(rk.FileFormatError, match=what) as ei:
            fn(path)
        assert "safetensors.torch.save_file" in str(ei.value) and os.fspath(path) in str(ei.value)
    assert not marker.exists()


@pytest.mark.parametrize("kind", ["proj", "rnn_relu"])
def test_projected_lstm_and_rnn_files(tmp_path: Path, kind: str) -> None:
    """``torch.nn.LSTM(proj_size=2)`` and ``torch.nn.RNN(nonlinearity="relu")`` stacks load and
    compute what torch computes (outputs and every final state part)."""
    torch.manual_seed(0)
    if kind == "proj":
        mod = torch.nn.LSTM(IN, H, num_layers=2, proj_size=2, bidirectional=True, batch_first=True)
    else:
        mod = torch.nn.RNN(IN, H, num_layers=2, nonlinearity="relu", bidirectional=True, batch_first=True)
    st_torch.save_file(mod.state_dict(), tmp_path / "m.safetensors")
    net = rk.load_torch_rnn(tmp_path / "m.safetensors", batch_first=True,
                            nonlinearity="tanh" if kind == "proj" else "relu")
    assert net.mode == ("lstm" if kind == "proj" else "rnn")
    assert net.config.proj_size == (2 if kind == "proj" else 0)
    x = np.random.default_rng(0).standard_normal((3, 4, IN)).astype(np.float32)
    out, state = net.seq(x)
    t_out, t_state = mod(torch.from_numpy(x))
    t_parts = t_state if isinstance(t_state, tuple) else (t_state,)
    np.testing.assert_allclose(out, t_out.detach().numpy(), atol=1e-5)
    for ours, theirs in zip(state, t_parts, strict=True):
        np.testing.assert_allclose(ours, theirs.detach().numpy(), atol=1e-5)
    save = tmp_path / "back.safetensors"
    rk.save_torch_safetensors(net, save)
    again = type(mod)(IN, H, num_layers=2, bidirectional=True, batch_first=True,
                      **({"proj_size": 2} if kind == "proj" else {"nonlinearity": "relu"}))
    again.load_state_dict(st_torch.load_file(save))   # accepted as it is
    np.testing.assert_allclose(again(torch.from_numpy(x))[0].detach().numpy(), out, atol=1e-5)


def test_header_length_that_looks_like_a_pickle(tmp_path: Path) -> None:
    """A safetensors header of 1152 bytes starts the file with b"\\x80\\x04", a pickle's
    protocol-4 mark; it is read as the safetensors file it is."""
    import json
    import struct

    header = json.dumps({"weight_hh_l0": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header = header.ljust(0x480, b" ")
    p = tmp_path / "odd.safetensors"
    p.write_bytes(struct.pack("<Q", len(header)) + header + np.float32(2.5).tobytes())
    assert p.read_bytes()[:2] == b"\x80\x04"
    assert rk.load_torch_safetensors(p)["weight_hh_l0"].tolist() == [2.5]


def test_other_refusals(tmp_path: Path) -> None:
    torch.manual_seed(0)
    state = _module("gru", 2, False).state_dict()
    del state["weight_hh_l1"]
    st_torch.save_file(state, tmp_path / "broken.safetensors")
    with pytest.raises(rk.InvalidInputError, match=r"weight_hh_l1: expected \(15, 5\), got missing"):
        rk.load_torch_rnn(tmp_path / "broken.safetensors")
    (tmp_path / "junk.bin").write_bytes(b"\x00" * 64)
    with pytest.raises(rk.FileFormatError, match="not a safetensors file"):
        rk.load_torch_safetensors(tmp_path / "junk.bin")
    with pytest.raises(FileNotFoundError):
        rk.load_torch_rnn(tmp_path / "absent.safetensors")
