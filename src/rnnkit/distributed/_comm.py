"""What the team and its buffers use of a process group (:class:`rnnkit.distributed.MPI` is
one): ranks, the partition of the batch and the collectives. A Protocol, so that the modules
below ``_mpi`` need not import it (``_mpi`` builds their team)."""

from __future__ import annotations

from typing import Protocol, TypeVar

import numpy as np

from rnnkit.distributed._guard import Guard

T = TypeVar("T")


class Comm(Protocol):
    rank: int
    size: int
    shard: str

    @property
    def is_root(self) -> bool: ...

    def bounds(self, n: int, rank: int | None = None) -> tuple[int, int]: ...

    def allreduce_sum(self, buf: np.ndarray) -> None: ...

    def bcast_array(self, buf: np.ndarray) -> None: ...

    def bcast(self, obj: T) -> T: ...

    def allgather(self, obj: T) -> list[T]: ...

    def raise_failures(self, guard: Guard, what: str) -> None: ...


__all__ = ["Comm"]
