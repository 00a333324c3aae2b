"""The two pictures of the command line, drawn with matplotlib's Agg canvas (no display, no
pyplot state). matplotlib is imported only here, only when a picture is drawn; it is the
optional ``plot`` extra (``pip install "rnnkit[plot]"``)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np


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
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        fig.savefig(tmp, format="png")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
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


def forecast_plot(x: np.ndarray, actual: np.ndarray, lines: dict[str, tuple[np.ndarray, np.ndarray]],
                  path: str | os.PathLike[str], *, title: str, ylabel: str,
                  split_at: float | None = None) -> Path:
    """The actual series and each named forecast ``(x, y)``; a vertical line at ``split_at``."""
    fig = _figure(9.0, 4.5)
    ax = fig.add_subplot(1, 1, 1)
    ax.plot(x, actual, color="black", lw=1.2, label="actual")
    styles = ["-", "--", ":"]
    for k, (name, (xx, yy)) in enumerate(lines.items()):
        ax.plot(xx, yy, styles[k % len(styles)], lw=1.4 if k == 0 else 1.0, label=name)
    if split_at is not None:
        ax.axvline(split_at, color="grey", lw=0.8, ls=":")
        ax.text(split_at, ax.get_ylim()[1], " held out ->", va="top", ha="left", color="grey")
    ax.set_xlabel("year")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left")
    fig.tight_layout()
    return _save(fig, Path(path))
