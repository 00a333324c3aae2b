"""A user's cell in a module of its own (``registry_cells.LeakyCell``), for the registry tests:
h_t = tanh(x_t W + b + u * h_{t-1}), u a per-unit recurrent weight. The file
tests/data/cell_registry/bare_name.rnnkit holds a model over it written when cell keys were bare
class names (``"LeakyCell"``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

import rnnkit as rk

Arrays = tuple[np.ndarray, ...]


def _uniform(rng: np.random.Generator, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return rng.uniform(-0.5, 0.5, shape).astype(dtype)


class LeakyCell(rk.Cell):
    name = "Leaky"
    input_kernel, bias = "kernel", "bias"

    def params(self, input_dim: int) -> list[rk.Param]:
        H = self.units
        return [rk.Param("kernel", (input_dim, H), _uniform), rk.Param("bias", (1, H), _uniform),
                rk.Param("u", (H,), _uniform)]

    def step(self, w: Mapping[str, np.ndarray], inp: np.ndarray, prev: Arrays,
             park: dict[str, np.ndarray] | None) -> Arrays:
        return (np.tanh(inp + w["u"] * prev[0]),)

    def step_back(self, w: Mapping[str, np.ndarray], d: Arrays, inp: np.ndarray | None, prev: Arrays,
                  new: Arrays, park: Mapping[str, np.ndarray]) -> rk.StepBack:
        da = d[0] * (1.0 - new[0] ** 2)
        return rk.StepBack(d_prev=(da * w["u"],), d_inp=da, params={"u": (da * prev[0]).sum(axis=0)})


rk.register_cell(LeakyCell)
