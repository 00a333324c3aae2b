"""Metrics: accuracy in its three forms against counted values, mae/mse against hand values."""

from __future__ import annotations

import numpy as np
import pytest

import rnnkit as rk
from rnnkit import metrics


def test_binary_accuracy_thresholds_at_half() -> None:
    acc = metrics.Accuracy()
    y = [[1.0], [0.0], [1.0], [0.0]]
    p = [[0.9], [0.2], [0.4], [0.51]]          # right, right, wrong, wrong
    assert acc(y, p) == 0.5
    assert acc([1, 0, 1, 0], p) == 0.5         # labels (N,) against (N, 1)
    assert acc(np.array([1, 0, 1, 0]), np.array([0.9, 0.2, 0.4, 0.51])) == 0.5   # rank 1
    assert metrics.Accuracy(threshold=0.3)(y, p) == 0.75   # 0.4 -> 1 now right, 0.51 still wrong
    assert metrics.Accuracy(threshold=0.6)(y, p) == 0.75   # 0.51 -> 0 now right, 0.4 still wrong
    assert acc([[1.0]], [[0.5]]) == 0.0                     # strictly greater than the threshold


def test_categorical_and_sparse_accuracy() -> None:
    acc = metrics.Accuracy()
    p = np.array([[0.1, 0.7, 0.2], [0.5, 0.3, 0.2], [0.2, 0.2, 0.6], [0.3, 0.4, 0.3]])
    onehot = np.eye(3)[[1, 0, 1, 2]]          # right, right, wrong, wrong
    assert acc(onehot, p) == 0.5
    assert acc([1, 0, 1, 2], p) == 0.5
    assert acc([[1], [0], [1], [2]], p) == 0.5
    assert acc([1.0, 0.0, 2.0, 1.0], p) == 1.0
    # rank 3: every (sample, timestep) position counts
    p3 = np.stack([p, p[::-1]])
    assert acc(np.array([[1, 0, 1, 2], [1, 1, 0, 1]]), p3) == 5 / 8


def test_accuracy_errors_name_the_shapes_and_labels() -> None:
    acc = metrics.Accuracy()
    with pytest.raises(rk.InvalidInputError, match=r"\(4, 2\).*\(4, 3\)"):
        acc(np.zeros((4, 2)), np.zeros((4, 3)))
    with pytest.raises(rk.InvalidInputError, match=r"\(3,\).*\(4, 1\)"):
        acc(np.zeros(3), np.zeros((4, 1)))
    with pytest.raises(rk.InvalidInputError, match="0 or 1.*0.7"):
        acc([[0.7]], [[0.9]])
    with pytest.raises(rk.InvalidInputError, match="whole.*1.5"):
        acc([1.5], [[0.2, 0.8]])
    with pytest.raises(rk.InvalidParameterError, match="threshold"):
        metrics.Accuracy(threshold=2.0)


def test_mae_and_mse() -> None:
    yt = [[0.0, 1.0], [2.0, 3.0]]
    yp = [[1.0, 1.0], [2.0, 5.0]]
    assert metrics.MeanAbsoluteError()(yt, yp) == pytest.approx(0.75, abs=1e-15)
    assert metrics.MeanSquaredError()(yt, yp) == pytest.approx(1.25, abs=1e-15)
    with pytest.raises(rk.InvalidInputError, match=r"\(2, 2\).*\(4,\)"):
        metrics.MeanAbsoluteError()(yt, [1.0, 1.0, 2.0, 5.0])


def test_get_and_names() -> None:
    assert isinstance(metrics.get("accuracy"), metrics.Accuracy)
    assert isinstance(metrics.get("acc"), metrics.Accuracy)
    assert isinstance(metrics.get("mae"), metrics.MeanAbsoluteError)
    assert isinstance(metrics.get("mse"), metrics.MeanSquaredError)
    assert [metrics.get(n).name for n in ("accuracy", "mae", "mse")] == ["accuracy", "mae", "mse"]
    m = metrics.Accuracy(0.7)
    assert metrics.get(m) is m
    with pytest.raises(rk.InvalidParameterError, match="f1"):
        metrics.get("f1")
