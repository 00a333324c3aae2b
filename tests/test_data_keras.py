"""``rnnkit.data.timeseries_dataset``, ``pad_sequences`` and ``windows(sampling_rate=,
target_offset=)`` against references written here (plain loops over Keras' documented
semantics) and against Keras' own functions where they run: ``keras.utils.pad_sequences``
needs keras only; ``timeseries_dataset_from_array`` needs TensorFlow or, with
``format="grain"``, the ``grain`` package."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest

import rnnkit as rk
from harness import keras_or_skip

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

R = np.random.default_rng(3)
DATA = R.normal(size=(40, 3))
TARGETS = np.arange(40) * 10.0


def reference(data: np.ndarray, targets: Any, length: int, stride: int = 1, rate: int = 1,
              batch: int = 128, start: int | None = None, end: int | None = None) -> list[Any]:
    """Keras' semantics by loops: the window starting at row i (from start) pairs with targets[i]."""
    lo = start or 0
    hi = len(data) if end is None else end
    n = hi - lo - (length - 1) * rate
    if targets is not None:
        n = min(n, len(targets))
    samples = []
    for p in range(0, n, stride):
        x = np.stack([data[lo + p + k * rate] for k in range(length)])
        samples.append(x if targets is None else (x, targets[lo + p]))
    out = []
    for a in range(0, len(samples), batch):
        part = samples[a:a + batch]
        out.append(np.stack(part) if targets is None else (np.stack([s[0] for s in part]),
                                                             np.stack([s[1] for s in part])))
    return out


def assert_same(got: Any, want: list[Any]) -> None:
    got = list(got)
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        for ga, wa in zip(g if isinstance(g, tuple) else (g,), w if isinstance(w, tuple) else (w,),
                          strict=True):
            assert np.asarray(ga).dtype == np.asarray(wa).dtype
            np.testing.assert_array_equal(np.asarray(ga), wa)


CASES = [dict(length=5), dict(length=4, stride=3), dict(length=3, rate=2), dict(length=4, stride=2, rate=3),
         dict(length=5, batch=7), dict(length=2, start=5), dict(length=3, end=30, rate=2, batch=4),
         dict(length=3, start=4, end=25, stride=2, batch=3)]


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("with_targets", [True, False])
def test_timeseries_dataset_equals_the_reference(case: dict[str, Any], with_targets: bool) -> None:
    t = TARGETS if with_targets else None
    ds = rk.data.timeseries_dataset(DATA, t, case["length"], sequence_stride=case.get("stride", 1),
                                    sampling_rate=case.get("rate", 1), batch_size=case.get("batch", 128),
                                    start_index=case.get("start"), end_index=case.get("end"))
    assert_same(ds, reference(DATA, t, **case))


def test_targets_offset_from_the_windows_and_shorter_than_the_data() -> None:
    # Keras' forecasting set-up: the target of each window is the row 2 steps after its last row
    length, h = 6, 2
    ds = rk.data.timeseries_dataset(DATA[:-h], DATA[length - 1 + h:, 0], length, batch_size=8)
    got = list(ds)
    assert sum(len(b[0]) for b in got) == 40 - length - h + 1
    for b, (x, y) in enumerate(got):
        for i in range(len(x)):
            s = 8 * b + i
            np.testing.assert_array_equal(x[i], DATA[s:s + length])
            assert y[i] == DATA[s + length - 1 + h, 0]
    short = rk.data.timeseries_dataset(DATA, TARGETS[:10], 3)       # fewer targets: fewer windows
    assert_same(short, reference(DATA, TARGETS[:10], 3))


def test_timeseries_dataset_equals_keras_own() -> None:
    keras = keras_or_skip()
    try:
        import tensorflow  # noqa: F401
        fmt: dict[str, str] = {}
    except ImportError:
        pytest.importorskip("grain")
        fmt = {"format": "grain"}
    for case in CASES:
        kw = dict(sequence_stride=case.get("stride", 1), sampling_rate=case.get("rate", 1),
                  batch_size=case.get("batch", 128), start_index=case.get("start"), end_index=case.get("end"))
        theirs = [tuple(np.asarray(a) for a in b) for b in
                  keras.utils.timeseries_dataset_from_array(DATA, TARGETS, case["length"], **kw, **fmt)]
        ours = list(rk.data.timeseries_dataset(DATA, TARGETS, case["length"], **kw))
        assert len(ours) == len(theirs)
        for (xo, yo), (xt, yt) in zip(ours, theirs, strict=True):
            np.testing.assert_array_equal(xo, xt)
            np.testing.assert_array_equal(yo, yt)


def test_shuffle_keeps_the_pairs_and_redraws_each_epoch() -> None:
    plain = rk.data.timeseries_dataset(DATA, TARGETS, 4, batch_size=5)
    a = rk.data.timeseries_dataset(DATA, TARGETS, 4, batch_size=5, shuffle=True, seed=11)
    b = rk.data.timeseries_dataset(DATA, TARGETS, 4, batch_size=5, shuffle=True, seed=11)

    def pairs(ds: Any) -> list[tuple[float, bytes]]:
        return [(float(y), x.tobytes()) for bx, by in ds for x, y in zip(bx, by, strict=True)]

    first = pairs(a)
    assert first == pairs(b) and first != pairs(plain) and sorted(first) == sorted(pairs(plain))
    a.on_epoch_end()
    assert pairs(a) != first and sorted(pairs(a)) == sorted(first)


def test_timeseries_dataset_feeds_fit_directly() -> None:
    series = np.sin(np.arange(300) * 0.1).astype(np.float32)[:, None]
    targets = series[5:, 0]                                 # the next row after each window of 4
    ds = rk.data.timeseries_dataset(series, targets, 4, sequence_stride=2, batch_size=16)
    xs = np.concatenate([x for x, _ in reference(series, targets, 4, stride=2)])
    ys = np.concatenate([y for _, y in reference(series, targets, 4, stride=2)])

    def model() -> rk.Sequential:
        return rk.Sequential([rk.LSTM(3, seed=0), rk.Dense(1, seed=1)], input_shape=(None, 4, 1)).compile(
            rk.Adam(0.01), "mse")

    a, b = model(), model()
    ha = a.fit(ds, epochs=2, seed=5)
    hb = b.fit(xs, ys[:, None], 2, batch_size=16, shuffle=False, seed=5)
    assert ha.history["loss"] == hb.history["loss"]
    for wa, wb in zip(a.get_weights(), b.get_weights(), strict=True):
        np.testing.assert_array_equal(wa, wb)
    every = np.concatenate(reference(series, None, 4, stride=2))   # no targets: every window
    assert len(every) == len(xs) + 1
    np.testing.assert_array_equal(a.predict(rk.data.timeseries_dataset(series, None, 4, sequence_stride=2)),
                                  a.predict(every))


def test_timeseries_dataset_refusals() -> None:
    make = rk.data.timeseries_dataset
    with pytest.raises(rk.InvalidInputError, match="no window fits"):
        make(DATA[:5], None, 4, sampling_rate=2)
    with pytest.raises(rk.InvalidParameterError,
                       match=r"the data has 40 rows\): start_index must be an int in \[0, 39\], got 40"):
        make(DATA, TARGETS, 3, start_index=40)
    with pytest.raises(rk.InvalidParameterError, match="end_index 5 must be above start_index 8"):
        make(DATA, TARGETS, 3, start_index=8, end_index=5)
    with pytest.raises(rk.InvalidParameterError, match="batch_size must be an int >= 1, got None"):
        make(DATA, TARGETS, 3, batch_size=None)  # type: ignore[arg-type]
    for arg in ("sequence_stride", "sampling_rate"):
        with pytest.raises(rk.InvalidParameterError, match=arg):
            make(DATA, TARGETS, 3, **{arg: 0})
    with pytest.raises(rk.InvalidInputError, match="targets has 3 rows"):
        make(DATA, TARGETS[:3], 3, start_index=5)
    with pytest.raises(rk.InvalidInputError, match="real numbers"):
        make(np.array(["a", "b", "c"]), None, 2)


# -- pad_sequences ---------------------------------------------------------------------------------
SEQS = [[1, 2, 3], [4, 5], [], [6, 7, 8, 9, 10], [11]]


def reference_pad(seqs: list[Any], maxlen: int | None, padding: str, truncating: str, value: float,
                  dtype: str) -> np.ndarray:
    n = maxlen if maxlen is not None else max(len(s) for s in seqs)
    rows = []
    for s in seqs:
        s = list(s)
        cut = s[len(s) - n:] if truncating == "pre" and len(s) > n else s[:n]
        pad = [value] * (n - len(cut))
        rows.append(pad + cut if padding == "pre" else cut + pad)
    return np.array(rows, dtype=dtype)


@pytest.mark.parametrize("maxlen,padding,truncating,value,dtype", list(itertools.product(
    [None, 3, 1, 7], ["pre", "post"], ["pre", "post"], [0.0, -1.0], ["int32", "float32"])))
def test_pad_sequences_equals_keras(maxlen: int | None, padding: str, truncating: str, value: float,
                                    dtype: str) -> None:
    got = rk.data.pad_sequences(SEQS, maxlen=maxlen, dtype=dtype, padding=padding, truncating=truncating,
                                value=value)
    want = reference_pad(SEQS, maxlen, padding, truncating, value, dtype)
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)
    keras = keras_or_skip()
    theirs = keras.utils.pad_sequences(SEQS, maxlen=maxlen, dtype=dtype, padding=padding,
                                       truncating=truncating, value=value)
    assert theirs.dtype == got.dtype
    np.testing.assert_array_equal(got, theirs)


def test_pad_sequences_of_vectors_equal_keras() -> None:
    seqs = [R.normal(size=(t, 2)).astype(np.float32) for t in (3, 1, 4)]
    got = rk.data.pad_sequences(seqs, maxlen=3, dtype="float32", padding="post", value=0.5)
    want = np.full((3, 3, 2), 0.5, np.float32)
    want[0], want[1, :1], want[2] = seqs[0], seqs[1], seqs[2][1:]
    np.testing.assert_array_equal(got, want)
    keras = keras_or_skip()
    np.testing.assert_array_equal(got, keras.utils.pad_sequences(seqs, maxlen=3, dtype="float32",
                                                                 padding="post", value=0.5))


def test_pad_sequences_refuses_what_keras_would_change_silently() -> None:
    with pytest.raises(rk.InvalidInputError, match="non-integer values.*would truncate"):
        rk.data.pad_sequences([[0.5, 1.0]])                    # Keras: [[0, 1]]
    np.testing.assert_array_equal(rk.data.pad_sequences([[1.0, 2.0]]), [[1, 2]])   # integral floats fit
    with pytest.raises(rk.InvalidInputError, match="outside dtype uint8"):
        rk.data.pad_sequences([[300]], dtype="uint8")
    with pytest.raises(rk.InvalidParameterError, match="value 0.5 is not a value"):
        rk.data.pad_sequences([[1]], value=0.5)
    with pytest.raises(rk.InvalidParameterError, match="padding must be 'pre' or 'post'"):
        rk.data.pad_sequences([[1]], padding="middle")
    with pytest.raises(rk.InvalidParameterError, match="dtype must be an int or float dtype"):
        rk.data.pad_sequences([["a"]], dtype=object)
    with pytest.raises(rk.InvalidInputError, match="steps of sequence 1 have shape"):
        rk.data.pad_sequences([np.zeros((2, 3)), np.zeros((2, 4))], dtype="float32")
    with pytest.raises(rk.InvalidInputError, match="non-empty list"):
        rk.data.pad_sequences([])
    with pytest.raises(rk.InvalidParameterError, match="maxlen must be an int >= 1"):
        rk.data.pad_sequences([[1]], maxlen=0)


# -- windows(sampling_rate=, target_offset=) -------------------------------------------------------
def test_windows_sampling_rate_is_keras_with_the_targets_shifted() -> None:
    series = R.normal(size=(50, 2))
    for window, h, rate in [(4, 1, 2), (3, 0, 3), (5, 2, 1)]:
        span = (window - 1) * rate + 1
        got = rk.data.windows(series, window, h, batch_size=6, sampling_rate=rate, dtype="float64")
        want = reference(series, series[span - 1 + h:], window, rate=rate, batch=6)
        assert_same(got, [(x, y) for x, y in want])


def test_windows_target_offset_takes_targets_of_any_length() -> None:
    series = R.normal(size=(30, 2))
    t = np.arange(12.0)[:, None]
    got = rk.data.windows(series, 3, batch_size=4, sampling_rate=2, targets=t, target_offset=0,
                          dtype="float64")
    assert_same(got, reference(series, t, 3, rate=2, batch=4))
    later = rk.data.windows(series, 3, targets=t, target_offset=2, dtype="float64")
    assert_same(later, reference(series, t[2:], 3))
    with pytest.raises(rk.InvalidParameterError, match="not both"):
        rk.data.windows(series, 3, 1, targets=t, target_offset=0)
    with pytest.raises(rk.InvalidInputError, match="pass target_offset="):
        rk.data.windows(series, 3, targets=t)
