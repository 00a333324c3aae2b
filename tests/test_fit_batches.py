"""fit / evaluate / predict on batch sources: generators, re-iterables, rk.data.Dataset;
steps_per_epoch, validation_steps, prefetch, errors naming the step."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from rnnkit.layers import Dense, Dropout

RNG = np.random.default_rng(0)
X = RNG.normal(size=(20, 5, 3))
Y = RNG.normal(size=(20, 2))
BS = 6


def _model() -> rk.Sequential:
    m = rk.Sequential([rk.LSTM(4, seed=1, dtype="float64"), Dropout(0.3),
                       Dense(2, seed=2, dtype="float64")], input_shape=(None, 5, 3))
    m.compile(rk.Adam(0.01), "mse", metrics=["mae"])
    return m


def _batches(epochs: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    for _ in range(epochs):
        for s in range(0, 20, BS):
            yield X[s:s + BS], Y[s:s + BS]


class Fixed(rk.data.Dataset):
    """The batches of fit(X, Y, batch_size=BS, shuffle=False), counting on_epoch_end calls."""

    def __init__(self) -> None:
        self.ends = 0

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return X[i * BS:(i + 1) * BS], Y[i * BS:(i + 1) * BS]

    def on_epoch_end(self) -> None:
        self.ends += 1


def _same(a: rk.Sequential, b: rk.Sequential) -> None:
    for p, q in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(p, q)


@pytest.mark.parametrize("workers", [0, 1, 3])
def test_generator_and_dataset_give_the_weights_of_the_array_path_bit_for_bit(workers: int) -> None:
    ref = _model()
    h_ref = ref.fit(X, Y, 3, batch_size=BS, shuffle=False, seed=5)
    gen = _model()
    h_gen = gen.fit(_batches(3), epochs=3, steps_per_epoch=4, seed=5, workers=workers)
    _same(ref, gen)
    assert h_gen.history == h_ref.history
    ds_model, ds = _model(), Fixed()
    h_ds = ds_model.fit(ds, epochs=3, seed=5, workers=workers)
    _same(ref, ds_model)
    assert h_ds.history == h_ref.history and ds.ends == 3


def test_dataset_reshuffling_in_on_epoch_end_is_called_once_per_epoch() -> None:
    class Shuffled(Fixed):
        def __init__(self) -> None:
            super().__init__()
            self.order = np.arange(20)
            self.rng = np.random.default_rng(1)
            self.seen: list[list[int]] = []

        def __getitem__(self, i: int) -> tuple[np.ndarray, np.ndarray]:
            idx = self.order[i * BS:(i + 1) * BS]
            self.seen[-1] += idx.tolist() if self.seen else []
            return X[idx], Y[idx]

        def on_epoch_end(self) -> None:
            super().on_epoch_end()
            self.order = self.rng.permutation(20)
            self.seen.append([])

    ds = Shuffled()
    ds.seen.append([])
    _model().fit(ds, epochs=4, workers=0)
    assert ds.ends == 4
    assert all(sorted(s) == list(range(20)) for s in ds.seen[:4])
    assert ds.seen[0] == list(range(20)) and ds.seen[1] != ds.seen[2]


def test_a_finite_generator_that_runs_out_ends_the_epoch_and_then_training() -> None:
    m = _model()
    with pytest.warns(UserWarning, match="no batch in epoch 2"):
        hist = m.fit(_batches(1), epochs=5)
    assert hist.epoch == [0]
    # a re-iterable object starts again each epoch
    class Again:
        def __iter__(self) -> Iterator[Any]:
            return _batches(1)

    hist = _model().fit(Again(), epochs=3, seed=5)
    ref = _model().fit(X, Y, 3, batch_size=BS, shuffle=False, seed=5)
    assert hist.history == ref.history
    # steps_per_epoch shorter than the data: the generator carries on in the next epoch
    seen: list[float] = []

    def tagged() -> Iterator[Any]:
        for k in range(8):
            seen.append(k)
            yield X[:4] + k, Y[:4]

    _model().fit(tagged(), epochs=2, steps_per_epoch=3, workers=0)
    assert seen == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("workers", [0, 1])
def test_a_generator_raising_mid_epoch_surfaces_typed_naming_the_step(workers: int) -> None:
    def broken() -> Iterator[Any]:
        yield X[:6], Y[:6]
        yield X[6:12], Y[6:12]
        raise ValueError("disk went away")

    with pytest.raises(rk.data.DataSourceError, match="batch 3 of epoch 1") as info:
        _model().fit(broken(), epochs=2, workers=workers)
    assert isinstance(info.value, rk.Error)
    assert isinstance(info.value.__cause__, ValueError) and "disk went away" in str(info.value)

    class Bad(Fixed):
        def __getitem__(self, i: int) -> Any:
            if i == 2:
                raise KeyError("row 14")
            return super().__getitem__(i)

    with pytest.raises(rk.data.DataSourceError, match="batch 3 of epoch 1"):
        _model().fit(Bad(), epochs=1, workers=workers)


def test_evaluate_predict_and_validation_on_sources() -> None:
    m = _model()
    m.fit(X, Y, 2, batch_size=BS, seed=1)
    want = m.evaluate(X, Y, batch_size=BS, return_dict=True)
    got = m.evaluate(Fixed(), return_dict=True)
    assert isinstance(want, dict) and isinstance(got, dict)
    assert got == pytest.approx(want, rel=1e-12)
    np.testing.assert_array_equal(m.predict(_batches(1)), m.predict(X, batch_size=BS))
    np.testing.assert_array_equal(m.predict((x for x, _ in _batches(1)), steps=2),
                                  m.predict(X[:12], batch_size=BS))
    first2 = m.evaluate(Fixed(), steps=2, return_dict=True)
    assert first2 == pytest.approx(m.evaluate(X[:12], Y[:12], batch_size=BS, return_dict=True), rel=1e-12)
    hist = _model().fit(_batches(2), epochs=2, steps_per_epoch=4, validation_data=Fixed(),
                        validation_steps=2, seed=3)
    ref = _model()
    rh = ref.fit(X, Y, 2, batch_size=BS, shuffle=False, seed=3)
    assert hist.history["loss"] == rh.history["loss"]
    val = ref.evaluate(X[:12], Y[:12], batch_size=BS, return_dict=True)
    assert isinstance(val, dict)
    assert hist.history["val_loss"][-1] == pytest.approx(val["loss"], rel=1e-12)


def test_bad_batches_and_arguments_are_refused_typed() -> None:
    with pytest.raises(rk.InvalidInputError, match=r"batch 1 of epoch 1: each batch must be a tuple"):
        _model().fit(iter([X[:6]]), epochs=1)
    with pytest.raises(rk.InvalidInputError, match="batch 2/4 of epoch 1"):
        _model().fit(iter([(X[:6], Y[:6]), (X[:6, :, :2], Y[:6])]), epochs=1, steps_per_epoch=4)
    with pytest.raises(rk.InvalidParameterError, match="batch_size"):
        _model().fit(_batches(1), batch_size=4)
    with pytest.raises(rk.InvalidParameterError, match="steps 5 exceed"):
        _model().fit(Fixed(), steps_per_epoch=5)
    with pytest.raises(rk.InvalidParameterError, match="steps_per_epoch needs a batch source"):
        _model().fit(X, Y, steps_per_epoch=2)
    with pytest.raises(rk.InvalidInputError, match="y \\(the targets\\) is missing"):
        _model().fit(X)
    with pytest.raises(rk.InvalidInputError, match="y \\(the targets\\) is missing"):
        _model().evaluate(X)
    with pytest.raises(rk.InvalidParameterError, match="workers"):
        _model().fit(Fixed(), workers=-1)
    with pytest.raises(rk.InvalidInputError, match="batch 1 of epoch 1: .*sample_weight has shape"):
        _model().fit(iter([(X[:6], Y[:6], np.ones(5))]), epochs=1)


def test_batches_with_sample_weights_equal_the_array_path() -> None:
    w = np.random.default_rng(3).uniform(0.1, 2.0, size=20)
    ref = _model()
    h_ref = ref.fit(X, Y, 2, batch_size=BS, shuffle=False, seed=5, sample_weight=w)
    gen = _model()
    batches = ((X[s:s + BS], Y[s:s + BS], w[s:s + BS]) for _ in range(2) for s in range(0, 20, BS))
    h_gen = gen.fit(batches, epochs=2, steps_per_epoch=4, seed=5)
    _same(ref, gen)
    assert h_gen.history == h_ref.history
    src = [(X[s:s + BS], Y[s:s + BS], w[s:s + BS]) for s in range(0, 20, BS)]
    ev = gen.evaluate(iter(src), return_dict=True)
    want = gen.evaluate(X, Y, batch_size=BS, sample_weight=w, return_dict=True)
    assert ev == pytest.approx(want, rel=1e-12)


def test_windows_and_variable_length_batches_train() -> None:
    series = np.sin(np.arange(400) / 7.0)
    train = rk.data.windows(series, 12, 1, batch_size=32, shuffle=True, seed=0)
    m = rk.Sequential([rk.GRU(8, seed=1), Dense(1, seed=2)], input_shape=(None, 12, 1))
    m.compile(rk.Adam(0.02), "mse")
    before = m.evaluate(rk.data.windows(series, 12, 1, batch_size=64))
    hist = m.fit(train, epochs=8)
    after = m.evaluate(rk.data.windows(series, 12, 1, batch_size=64))
    assert isinstance(before, float) and isinstance(after, float)
    assert after < before / 4 and len(hist.epoch) == 8
    # batches whose time extent differs (a free time axis): each step sees its own length
    free = rk.Sequential([rk.GRU(3, seed=1, dtype="float64"), Dense(2, seed=2, dtype="float64")],
                         input_shape=(None, None, 3))
    free.compile(rk.SGD(0.1), "mse")
    twin = rk.model_from_config(free.get_config())
    twin.set_weights(free.get_weights())
    twin.compile(rk.SGD(0.1), "mse")
    free.fit(iter([(X[:6, :2], Y[:6]), (X[6:12], Y[6:12])]), epochs=1)
    twin.fit(X[:6, :2], Y[:6], 1)
    twin.fit(X[6:12], Y[6:12], 1)
    _same(free, twin)


def test_bucketed_batches_hand_their_lengths_to_the_model() -> None:
    rng = np.random.default_rng(4)
    seqs = [rng.integers(1, 30, size=int(t)) for t in rng.integers(2, 15, size=37)]
    y = rng.normal(size=(37, 1))
    m = rk.Sequential([rk.Embedding(30, 4, seed=1, dtype="float64"), rk.LSTM(5, seed=2, dtype="float64"),
                       Dense(1, seed=3, dtype="float64")], input_shape=(None, None))
    m.compile(rk.SGD(0.05), "mse")
    ds = rk.data.bucket_by_length(seqs, 8, y, bucket_width=4, seed=0)
    alone = np.concatenate([m.predict(s[None, :]) for s in seqs])  # each sequence unpadded
    got = m.evaluate(ds)
    assert got == pytest.approx(float(np.mean((alone - y) ** 2)), rel=1e-12)
    padded_pred = np.concatenate([m.predict(ds[b][0]) for b in range(len(ds))])  # no lengths: differs
    order = np.concatenate([ds.indices(b) for b in range(len(ds))])
    assert np.abs(padded_pred - alone[order]).max() > 1e-4
    np.testing.assert_allclose(m.predict(ds), alone[order], rtol=1e-12)
    hist = m.fit(ds, epochs=3)
    assert hist.history["loss"][-1] < hist.history["loss"][0]
