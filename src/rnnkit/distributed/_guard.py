"""``Guard``: where a rank keeps the first exception of a region until the next collective."""

from __future__ import annotations

from typing import Any

from rnnkit.distributed._errors import DistributedError


class Guard:
    """A context manager that holds the first exception of a region instead of raising it.

    ``with guard.region("epoch 2/5, batch 3/8"): ...`` runs the body; an ``Exception`` is kept
    (with where it happened) for the next collective check, which raises it on every rank."""

    def __init__(self) -> None:
        self.error: BaseException | None = None
        self.where = ""
        self._where_next = ""

    def region(self, where: str) -> Guard:
        self._where_next = where
        return self

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, et: Any, ev: BaseException | None, tb: Any) -> bool:
        if ev is None or not isinstance(ev, Exception) or isinstance(ev, DistributedError):
            return False
        if self.error is None:
            self.error, self.where = ev, self._where_next
        return True

    @property
    def failed(self) -> bool:
        return self.error is not None

    def describe(self) -> str:
        e = self.error
        text = " ".join(str(e).split()) if e is not None else ""
        return f"{self.where}: {type(e).__name__}: {text}" if self.where else f"{type(e).__name__}: {text}"
