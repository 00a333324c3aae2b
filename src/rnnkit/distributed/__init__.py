"""Data-parallel training over MPI (the optional ``rnnkit[mpi]`` extra: mpi4py and an MPI).

``model.fit(x, y, ..., distributed=rk.distributed.MPI())`` run on every rank of
``mpiexec -n N python train.py`` splits each global batch across the ranks, averages the
gradients with one allreduce per flat buffer and takes the same optimizer step everywhere, so
every rank ends every step with bit-identical weights (``fit_with_batches`` and ``evaluate``
take ``distributed=`` too). Rank 0 runs the callbacks, the History and the progress bar.
Importing this module never imports mpi4py; making an :class:`MPI` does (MissingDependencyError
without it). See ``docs/distributed.md``.
"""

from rnnkit.distributed._errors import DistributedError
from rnnkit.distributed._mpi import MPI, SHARDS

__all__ = ["MPI", "SHARDS", "DistributedError"]
