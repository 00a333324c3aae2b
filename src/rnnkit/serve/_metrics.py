"""The server's metrics, in the Prometheus text exposition format (version 0.0.4): counters,
gauges and histograms with labels, kept in memory, written by :meth:`Metrics.render`."""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Sequence

import numpy as np

#: histogram buckets (upper bounds) by metric name; the last bucket is always +Inf
BUCKETS: dict[str, tuple[float, ...]] = {
    "rnnkit_serve_request_duration_seconds": (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                              0.5, 1.0, 2.5, 5.0, 10.0),
    "rnnkit_serve_parse_seconds": (0.00001, 0.00002, 0.00005, 0.0001, 0.0002, 0.0005, 0.001, 0.005),
    "rnnkit_serve_batch_wait_seconds": (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1),
    "rnnkit_serve_compute_seconds": (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
    "rnnkit_serve_commit_seconds": (0.0001, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5),
    "rnnkit_serve_batch_rows": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096),
    "rnnkit_serve_batch_requests": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
}

HELP = {
    "rnnkit_serve_requests_total": ("counter", "Requests answered, by route and HTTP status (WebSocket "
                                               "messages count under route ws_step)."),
    "rnnkit_serve_request_duration_seconds": ("histogram", "Time from a request's arrival to its answer."),
    "rnnkit_serve_parse_seconds": ("histogram", "Time to read and check a WebSocket step message."),
    "rnnkit_serve_batch_wait_seconds": ("histogram", "Time a job waited in the micro-batcher."),
    "rnnkit_serve_compute_seconds": ("histogram", "Time of one batched call (the kernels)."),
    "rnnkit_serve_commit_seconds": ("histogram", "Time to commit the new states of one batch of steps "
                                                 "(the database transaction, or memory only)."),
    "rnnkit_serve_batch_rows": ("histogram", "Rows (sequences x timesteps) per batched call."),
    "rnnkit_serve_batch_requests": ("histogram", "Requests per batched call."),
    "rnnkit_serve_active_streams": ("gauge", "Streams open now."),
    "rnnkit_serve_steps_total": ("counter", "Stream steps applied (a retried step answered again is not "
                                            "counted)."),
    "rnnkit_serve_streams_expired_total": ("counter", "Streams removed after their idle time."),
}

Labels = tuple[tuple[str, str], ...]


def _fmt_labels(labels: Labels, extra: tuple[tuple[str, str], ...] = ()) -> str:
    items = labels + extra
    if not items:
        return ""
    esc = [(k, v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')) for k, v in items]
    return "{" + ",".join(f'{k}="{v}"' for k, v in esc) + "}"


def _num(v: float) -> str:
    return repr(float(v)) if v != int(v) or abs(v) > 1e15 else str(int(v))


class Metrics:
    """Thread-safe counters, gauges and histograms. ``gauges`` maps a gauge's name to a function
    read at render time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counters: dict[str, dict[Labels, float]] = {}
        self._hist: dict[str, dict[Labels, list[float]]] = {}
        self.gauges: dict[str, Callable[[], float]] = {}
        self._flushes: list[Callable[[], None]] = []

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        """Add ``value`` to the counter ``name`` with ``labels``."""
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._counters.setdefault(name, {})
            series[key] = series.get(key, 0.0) + value

    def observe(self, name: str, value: float, **labels: str) -> None:
        """Record ``value`` in the histogram ``name`` (its buckets: :data:`BUCKETS`)."""
        bounds = BUCKETS[name]
        key = tuple(sorted(labels.items()))
        with self._lock:
            series = self._hist.setdefault(name, {})
            h = series.get(key)
            if h is None:
                h = series[key] = [0.0] * (len(bounds) + 3)  # buckets..., +Inf, sum, count
            h[bisect.bisect_left(bounds, value)] += 1
            h[-2] += value
            h[-1] += 1

    def observe_many(self, name: str, values: Sequence[float], **labels: str) -> None:
        """Record every value of ``values`` in the histogram ``name`` (one lock and one binning
        for a whole batch; the same counts as :meth:`observe` for each)."""
        if not len(values):
            return
        bounds = BUCKETS[name]
        key = tuple(sorted(labels.items()))
        arr = np.asarray(values, dtype=np.float64)
        counts = np.bincount(np.searchsorted(bounds, arr, side="left"), minlength=len(bounds) + 1)
        with self._lock:
            series = self._hist.setdefault(name, {})
            h = series.get(key)
            if h is None:
                h = series[key] = [0.0] * (len(bounds) + 3)
            for i, c in enumerate(counts.tolist()):
                h[i] += c
            total = h[-2]
            for v in arr.tolist():  # in order, as observe adds them
                total += v
            h[-2] = total
            h[-1] += arr.size

    def add_flush(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` before every :meth:`render` (a source that keeps its observations in a
        buffer of its own, for speed, moves them into the metrics there)."""
        self._flushes.append(fn)

    def counter(self, name: str, **labels: str) -> float:
        """The current value of a counter (0 when never incremented)."""
        for fn in self._flushes:
            fn()
        with self._lock:
            return self._counters.get(name, {}).get(tuple(sorted(labels.items())), 0.0)

    def render(self) -> str:
        """Every metric in the Prometheus text format."""
        out: list[str] = []
        for fn in self._flushes:
            fn()
        with self._lock:
            counters = {n: dict(s) for n, s in self._counters.items()}
            hists = {n: {k: list(v) for k, v in s.items()} for n, s in self._hist.items()}
        for name in sorted(set(counters) | set(hists) | set(self.gauges)):
            kind, text = HELP.get(name, ("untyped", name))
            out += [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]
            if name in self.gauges:
                out.append(f"{name} {_num(self.gauges[name]())}")
            for labels, v in sorted(counters.get(name, {}).items()):
                out.append(f"{name}{_fmt_labels(labels)} {_num(v)}")
            for labels, h in sorted(hists.get(name, {}).items()):
                cum = 0.0
                for bound, c in zip((*BUCKETS[name], float("inf")), h[:-2], strict=True):
                    cum += c
                    le = "+Inf" if bound == float("inf") else _num(bound)
                    out.append(f"{name}_bucket{_fmt_labels(labels, (('le', le),))} {_num(cum)}")
                out.append(f"{name}_sum{_fmt_labels(labels)} {_num(h[-2])}")
                out.append(f"{name}_count{_fmt_labels(labels)} {_num(h[-1])}")
        return "\n".join(out) + "\n"


__all__ = ["BUCKETS", "Metrics"]
