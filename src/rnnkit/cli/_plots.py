"""The pictures of the command line, drawn with matplotlib's Agg canvas (no display, no
pyplot state). matplotlib is imported only here, only when a picture is drawn; it is the
optional ``plot`` extra (``pip install "rnnkit[plot]"``)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from rnnkit._atomic import atomic_write_with


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100)
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path) -> Path:
    """PNG to a temporary file next to ``path``, then rename (atomic)."""
    # pixel size = figsize * 100, whatever the rc says
    atomic_write_with(path, lambda tmp: fig.savefig(tmp, format="png", dpi=100))
    return path


def loss_curve(history: dict[str, list[float]], path: str | os.PathLike[str], *, title: str,
               best_epoch: int | None = None) -> Path:
    """Training (and validation) loss per epoch, log scale; the restored epoch marked."""
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    for key, style in (("loss", "-"), ("val_loss", "--")):
        if key in history and history[key]:
            ep = np.arange(1, len(history[key]) + 1)
            ax.plot(ep, history[key], style, label="training loss" if key == "loss" else "validation loss")
    if best_epoch is not None:
        ax.axvline(best_epoch, color="grey", lw=0.8, ls=":", label=f"best epoch ({best_epoch}), restored")
    ax.set_yscale("log")
    ax.set_xlabel("epoch")
    ax.set_ylabel("mean squared error (scaled units)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return _save(fig, Path(path))


def forecast_figure(x: np.ndarray, actual: np.ndarray, lines: dict[str, tuple[np.ndarray, np.ndarray]], *,
                    title: str, ylabel: str, split_at: Any = None, part: str = "held-out test",
                    xlabel: str = "year", before: tuple[str, np.ndarray, np.ndarray] | None = None) -> Any:
    """Two panels: the whole actual series with the first forecast line (and ``before``, a
    forecast of the part preceding ``split_at``, under its own label), a vertical line at
    ``split_at`` marking the start of ``part``; below, ``part`` alone with the actual series
    and EVERY named forecast ``(x, y)``."""
    fig = _figure(9.0, 7.0)
    top = fig.add_subplot(2, 1, 1)
    bottom = fig.add_subplot(2, 1, 2)
    styles = [("-", 1.6), ("--", 1.1), (":", 1.3)]
    first = next(iter(lines.items()), None)
    top.plot(x, actual, color="black", lw=1.0, label="actual")
    if before is not None:
        top.plot(before[1], before[2], "-", color="tab:green", lw=1.0, label=before[0])
    if first is not None:
        top.plot(first[1][0], first[1][1], styles[0][0], color="tab:blue", lw=1.2, label=first[0])
    if split_at is not None:
        top.axvline(split_at, color="grey", lw=0.8, ls=":", label=f"start of the {part} part")
        keep = x >= split_at
        bottom.plot(x[keep], actual[keep], "o-", color="black", lw=1.0, ms=2.5, label="actual")
    for k, (name, (xx, yy)) in enumerate(lines.items()):
        sel = xx >= split_at if split_at is not None else np.ones(len(xx), dtype=bool)
        style, lw = styles[k % len(styles)]
        bottom.plot(xx[sel], yy[sel], style, lw=lw, label=name)
    top.set_title(title)
    bottom.set_title(f"{part} part")
    for ax in (top, bottom):
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", fontsize="small", ncols=2)
    fig.tight_layout()
    for ax in (top, bottom):
        clear_legend(ax)
    return fig


def clear_legend(ax: Any, margin: float = 0.03) -> None:
    """Raise the top of ``ax``'s y-axis until every data point lies below its legend (drawn in
    the upper-left corner), so the legend covers only empty space, never a peak."""
    legend = ax.get_legend()
    if legend is None:
        return
    canvas = ax.figure.canvas
    canvas.draw()
    box = legend.get_window_extent(canvas.get_renderer()).transformed(ax.transAxes.inverted())
    ys = [np.asarray(ln.get_ydata(), dtype=np.float64) for ln in ax.get_lines()
          if ln.get_transform() is ax.transData]      # not the split marker (axes coordinates)
    ys = [y[np.isfinite(y)] for y in ys if y.size]
    if not ys or not any(y.size for y in ys):
        return
    hi = max(float(y.max()) for y in ys if y.size)
    lo, top = ax.get_ylim()
    room = box.y0 - margin                      # the axes fraction left below the legend
    if room <= 0.05 or hi <= lo:
        return
    if (hi - lo) / (top - lo) > room:
        ax.set_ylim(lo, lo + (hi - lo) / room)


def forecast_plot(x: np.ndarray, actual: np.ndarray, lines: dict[str, tuple[np.ndarray, np.ndarray]],
                  path: str | os.PathLike[str], **kwargs: Any) -> Path:
    """:func:`forecast_figure` written to ``path`` as PNG (atomically)."""
    return _save(forecast_figure(x, actual, lines, **kwargs), Path(path))


def backtest_plot(bt: Any, path: str | os.PathLike[str], *, title: str) -> Path:
    """MASE per horizon step of every forecaster of a :class:`rnnkit.timeseries.Backtest`, the
    ranking's order in the legend, written to ``path`` as PNG (atomically)."""
    fig = _figure(7.0, 4.2)
    ax = fig.add_subplot(1, 1, 1)
    steps = np.arange(1, bt.actual.shape[1] + 1)
    for s in bt.ranking():
        ax.plot(steps, s.per_step["mase"], "o-", ms=3, label=f"{s.name} (MASE {s.overall['mase']:.3g})")
    ax.set_xlabel("horizon step")
    ax.set_ylabel("MASE (mean over the backtest windows)")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, Path(path))


def remove_pictures(folder: Path) -> list[Path]:
    """Delete ``loss.png`` / ``forecast.png`` an earlier run left in ``folder`` (so the folder
    never shows pictures of another model); returns what was removed."""
    gone = []
    for name in PICTURES:
        p = folder / name
        if p.is_file():
            p.unlink()
            gone.append(p)
    return gone


PICTURES = ("loss.png", "forecast.png", "backtest.png")


def fan_chart(history: list[tuple[str, np.ndarray, np.ndarray]], index: np.ndarray, median: np.ndarray,
              bands: list[tuple[float, np.ndarray, np.ndarray]], path: str | os.PathLike[str], *,
              title: str) -> Path:
    """A probabilistic forecast's fan chart, one panel per series (``history``: ``(id, dates,
    values)``; ``index`` (N, H) the forecast dates; ``median`` (N, H); ``bands``: ``(level,
    low, high)``, widest first, shaded lighter)."""
    n = len(history)
    fig = _figure(9, 2.4 * n + 0.6)
    for i, (sid, x, y) in enumerate(history):
        ax = fig.add_subplot(n, 1, i + 1)
        ax.plot(x, y, color="black", lw=1, label="history")
        for j, (level, lo, hi) in enumerate(bands):
            ax.fill_between(index[i], lo[i], hi[i], color="tab:blue", alpha=0.2 + 0.2 * j,
                            lw=0, label=f"{100 * level:g} % interval")
        ax.plot(index[i], median[i], color="tab:blue", lw=1.5, label="median")
        ax.set_title(sid, fontsize=9)
        if i == 0:
            ax.legend(fontsize=8, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    return _save(fig, Path(path))
