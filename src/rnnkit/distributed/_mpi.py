"""``MPI``: the handle that turns ``fit`` / ``evaluate`` data-parallel over MPI processes.

``mpi4py`` is imported when an ``MPI`` object is made, never earlier (so ``import rnnkit`` works
without it). An ``MPI`` object names a communicator (``MPI.COMM_WORLD`` by default) and how the
data is laid out across its ranks (``shard``):

- ``"replicated"``: every rank passes the SAME arrays; each global batch is split across ranks.
- ``"local"``: every rank passes its OWN shard (any sizes, each at least one sample); the global
  data set is the union of the shards.

Failures are collective (see :class:`rnnkit.distributed.DistributedError`): an exception in a
guarded region is held, announced at the next collective point, and raised as a
``DistributedError`` on every rank; anything else that escapes ``fit`` on one rank of several
prints ``rnnkit.distributed: rank K failed: ...`` on its stderr and calls ``MPI_Abort``.

A rank that waits in a collective longer than ``timeout`` seconds for ranks that never join it
(a rank that died without the process manager noticing, or one that hangs) aborts the job the
same way, naming the collective and the wait.
"""

from __future__ import annotations

import os
import sys
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import numpy as np

from rnnkit._errors import InvalidParameterError
from rnnkit._numbers import check_float
from rnnkit.distributed._errors import DistributedError
from rnnkit.distributed._guard import Guard
from rnnkit.distributed._team import MPITeam
from rnnkit.io._interop_errors import MissingDependencyError
from rnnkit.models._checks import Trainable
from rnnkit.models._training import Parallel

SHARDS = ("replicated", "local")
#: seconds a failing rank waits between writing its report and MPI_Abort (see ``abort``)
ABORT_GRACE_S = 0.5
#: the default ``timeout`` of a collective (seconds): PyTorch's default for its CPU process group
DEFAULT_TIMEOUT_S = 1800.0
#: a collective is polled without pausing for this long, then with pauses of ``_PAUSE_S``
_SPIN_S = 0.05
_PAUSE_S = 0.0005
T = TypeVar("T")


def import_mpi4py() -> Any:
    """``mpi4py.MPI`` (initialising MPI), or MissingDependencyError saying what to install."""
    try:
        from mpi4py import MPI as mpi  # noqa: N811 - the module's own name
    except (ImportError, RuntimeError) as e:
        raise MissingDependencyError(
            "rnnkit.distributed.MPI needs mpi4py and an MPI library, which could not be loaded "
            f"({type(e).__name__}: {e}); install them with `pip install rnnkit[mpi]` "
            "(mpi4py and the MPICH wheel), or mpi4py built against your cluster's MPI"
        ) from None
    return mpi


class MPI(Parallel):
    """Data-parallel training over the ranks of an MPI communicator (needs ``rnnkit[mpi]``).

    ``MPI(comm=None, shard="replicated", timeout=1800.0)``: ``comm`` an ``mpi4py``
    intra-communicator (default ``MPI.COMM_WORLD``); ``shard`` ``"replicated"`` (every rank
    passes the same data; each global batch is split) or ``"local"`` (each rank passes its own
    shard); ``timeout`` the seconds a rank waits in one collective for the other ranks before it
    aborts the job (a positive number, or None to wait forever; 30 minutes by default, as
    PyTorch's CPU process group). Pass it as
    ``model.fit(..., distributed=rk.distributed.MPI())`` (also ``fit_with_batches``,
    ``evaluate``), and run the script on every rank: ``mpiexec -n 2 python train.py``.

    Raises MissingDependencyError (naming the ``rnnkit[mpi]`` extra) when mpi4py or its MPI
    library cannot be loaded, InvalidParameterError for an unknown ``shard`` or a ``timeout``
    that is not a positive finite number or None, TypeError when
    ``comm`` is not an mpi4py intra-communicator. ``rank``, ``size`` and ``is_root`` (rank 0)
    describe this process.
    """

    def __init__(self, comm: Any = None, *, shard: str = "replicated",
                 timeout: float | None = DEFAULT_TIMEOUT_S) -> None:
        if not isinstance(shard, str) or shard not in SHARDS:
            raise InvalidParameterError(
                f"rnnkit.distributed.MPI: shard must be one of {list(SHARDS)}, got {shard!r}")
        wait = None if timeout is None else check_float(timeout, "timeout (seconds; None waits forever)",
                                                        "rnnkit.distributed.MPI", lo=0.0, lo_open=True)
        mpi = import_mpi4py()
        if comm is None:
            comm = mpi.COMM_WORLD
        elif not isinstance(comm, mpi.Intracomm):
            raise TypeError(f"rnnkit.distributed.MPI: comm must be an mpi4py intra-communicator "
                            f"(e.g. MPI.COMM_WORLD), got {type(comm).__name__}")
        self._mpi = mpi
        self.comm = comm
        self.shard = shard
        self.timeout: float | None = wait
        self.rank: int = int(comm.Get_rank())
        self.size: int = int(comm.Get_size())

    @property
    def is_root(self) -> bool:
        """True on rank 0, the rank that runs callbacks, the progress bar and checkpoints."""
        return self.rank == 0

    def __repr__(self) -> str:
        return f"MPI(rank={self.rank}, size={self.size}, shard={self.shard!r}, timeout={self.timeout!r})"

    def team(self, model: Trainable, what: str) -> MPITeam:
        """The team hooks of one ``fit`` / ``evaluate`` (``what``) of ``model`` on these ranks."""
        return MPITeam(self, model, what)

    # -- splitting ---------------------------------------------------------------------------
    def bounds(self, n: int, rank: int | None = None) -> tuple[int, int]:
        """``[lo, hi)`` of ``rank``'s part of ``n`` items: contiguous parts in rank order, the
        first ``n % size`` ranks one item longer (``numpy.array_split``'s rule); a rank's part
        is empty when ``n < size`` and its rank is ``>= n``."""
        r = self.rank if rank is None else rank
        q, m = divmod(int(n), self.size)
        lo = r * q + min(r, m)
        return lo, lo + q + (1 if r < m else 0)

    # -- collectives -------------------------------------------------------------------------
    def allreduce_sum(self, buf: np.ndarray) -> None:
        """Sum ``buf`` (contiguous) over the ranks, in place; every rank gets the same result."""
        if self.size > 1:
            self._wait(self.comm.Iallreduce(self._mpi.IN_PLACE, buf, op=self._mpi.SUM),
                       f"the sum of {buf.size} {buf.dtype.name} values over the ranks")

    def bcast_array(self, buf: np.ndarray) -> None:
        """Overwrite ``buf`` (contiguous) with rank 0's."""
        if self.size > 1:
            self._wait(self.comm.Ibcast(buf, root=0),
                       f"the broadcast of {buf.size} {buf.dtype.name} values from rank 0")

    def bcast(self, obj: T) -> T:
        """Rank 0's ``obj`` (pickled) on every rank."""
        if self.size == 1:
            return obj
        self._arrive("a broadcast from rank 0")
        return self.comm.bcast(obj, root=0)  # type: ignore[no-any-return]

    def allgather(self, obj: T) -> list[T]:
        """Every rank's ``obj``, in rank order, on every rank."""
        if self.size == 1:
            return [obj]
        self._arrive("an exchange of every rank's state")
        return list(self.comm.allgather(obj))

    def _arrive(self, what: str) -> None:
        """Wait (at most ``timeout``) until every rank reaches this point: before a pickled
        collective, which has no non-blocking form."""
        self._wait(self.comm.Ibarrier(), what)

    def _wait(self, req: Any, what: str) -> None:
        """Complete the non-blocking collective ``req``; past ``timeout`` seconds, abort the
        job naming ``what`` (the ranks that have not joined cannot be told apart from ranks
        that died, so no rank can carry on)."""
        if self.timeout is None:
            req.Wait()
            return
        start = time.monotonic()
        spin_until, deadline = start + _SPIN_S, start + self.timeout
        while not req.Test():
            now = time.monotonic()
            if now > deadline:
                self.abort(TimeoutError(
                    f"waited {now - start:.1f} s in {what}, which the other ranks did not join "
                    f"(timeout={self.timeout:g} s): a rank died without the process manager "
                    "ending the job, or hangs"), traceback_=False)
            if now > spin_until:
                time.sleep(_PAUSE_S)

    def raise_failures(self, guard: Guard, what: str) -> None:
        """Collective, called when some rank announced a failure: every rank learns which ranks
        failed and why, and raises the same DistributedError (chained to the local cause)."""
        notes = self.allgather(guard.describe() if guard.failed else None)
        failed = {r: n for r, n in enumerate(notes) if n is not None}
        raise DistributedError(what, failed, self.rank, self.size) from guard.error

    def collective(self, fn: Callable[[], T], what: str) -> T:
        """Run ``fn()`` on every rank and agree on the outcome (collective). When it raised on
        some rank, every rank raises: the exception itself when every rank failed the same way
        (the same type and message), else a DistributedError naming the failed ranks. Use it
        for rank-local work before a collective call, e.g. reading each rank's data, so that
        one rank's error does not leave the others waiting."""
        guard = Guard()
        result: T | None = None
        with guard.region(what):
            result = fn()
        notes = self.allgather(guard.describe() if guard.failed else None)
        failed = {r: n for r, n in enumerate(notes) if n is not None}
        if failed:
            if guard.error is not None and len(failed) == self.size and len(set(failed.values())) == 1:
                raise guard.error
            raise DistributedError(what, failed, self.rank, self.size) from guard.error
        return result  # type: ignore[return-value]

    def run(self, fn: Callable[[], T]) -> T:
        """``fn()``; an exception that is not already collective ends the whole job when there
        are several ranks: ``rnnkit.distributed: rank K failed: ...`` on stderr, then
        ``MPI_Abort`` (the other ranks cannot know where this one stopped, so they would wait
        in their next collective forever)."""
        try:
            return fn()
        except DistributedError:
            raise
        except BaseException as e:
            if self.size > 1:
                self.abort(e)
            raise

    def abort(self, exc: BaseException, code: int = 1, *, prefix: str = "rnnkit.distributed: ",
              traceback_: bool = True) -> NoReturn:
        """Report ``exc`` (traceback, then one line naming this rank) on this rank's stderr and
        end every rank of the communicator with exit status ``code``; never returns."""
        tb = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)) if traceback_ else ""
        text = " ".join(str(exc).split()) or "(no message)"
        sys.stderr.write(f"{tb}{prefix}rank {self.rank} failed: {type(exc).__name__}: "
                         f"{text}; aborting all {self.size} ranks\n")
        sys.stderr.flush()
        # the report sits in a pipe to the process manager, which forwards it asynchronously and
        # drops what it has not read once MPI_Abort tears the job down (seen: an empty stderr from
        # mpiexec on a busy machine); a moment's pause lets it through
        time.sleep(ABORT_GRACE_S)
        self.comm.Abort(code)
        os._exit(code)  # MPI_Abort may return before the process manager ends this process
