"""Shared pieces of the command line: the error type, atomic text writes, the metrics table."""

from __future__ import annotations

import os
from pathlib import Path

from rnnkit import datasets
from rnnkit.io._atomic import atomic_write_bytes


class CliError(Exception):
    """Bad command-line input that is not an rnnkit.Error (printed as one line, exit status 2)."""


def umask() -> int:
    """The process umask (read without changing it)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def ensure_dir(path: str | os.PathLike[str]) -> Path:
    """Create the output directory (and parents); a path that is a file is an error."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise CliError(f"{p}: exists and is not a directory; choose another --out")
    p.mkdir(parents=True, exist_ok=True)
    return p


def data_path(text: str) -> Path:
    """The CSV file ``text`` names: a file path, or the name of a bundled data set (``sunspots``,
    ``co2``) when no such file exists, so the documented commands run from any folder."""
    p = Path(text)
    if p.exists():
        if p.is_dir():
            raise CliError(f"{p}: is a directory, expected a CSV file")
        return p
    if text in datasets._FILES:
        return datasets.path(text)
    raise CliError(f"{text}: no such file (bundled data sets, usable by name: "
                   f"{', '.join(sorted(datasets._FILES))})")


def check_output_file(path: str | os.PathLike[str], flag: str) -> Path:
    """Refuse an output path that cannot be written BEFORE any work is done: its folder must
    exist and be writable, and the path itself must not be a folder."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise CliError(f"{flag} {p}: is a directory; give a file name")
    if not parent.is_dir():
        raise CliError(f"{flag} {p}: the folder {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise CliError(f"{flag} {p}: the folder {parent} is not writable")
    return p


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` (UTF-8) to a temporary file next to ``path``, then rename it over ``path``."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` atomically (``rnnkit.io._atomic``: temporary file, fsync, rename; a link is
    followed; stale temporaries of killed writers are removed)."""
    atomic_write_bytes(path, data)


def metrics_table(rows: list[tuple[str, float, float]], title: str) -> str:
    """A fixed-width table: one row per model, columns RMSE and MAE (data units)."""
    width = max(len(r[0]) for r in rows)
    lines = [title, f"  {'model':<{width}}  {'RMSE':>9}  {'MAE':>9}"]
    lines += [f"  {name:<{width}}  {r:9.3f}  {m:9.3f}" for name, r, m in rows]
    return "\n".join(lines)
