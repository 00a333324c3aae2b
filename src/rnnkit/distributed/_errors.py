"""``DistributedError``: a failure of one or more ranks, raised on every rank."""

from __future__ import annotations

from rnnkit._errors import Error, InvalidParameterError
from rnnkit._numbers import show


class DistributedError(Error, RuntimeError):
    """One or more ranks failed during a distributed ``fit`` / ``evaluate``; every rank raises
    this same error at the same point, so the job ends instead of waiting forever.

    ``failures`` maps each failed rank to what went wrong there (where, the exception type and
    its message); ``rank`` / ``size`` say which process raised this copy. On a failed rank the
    original exception is the ``__cause__``. The message reads
    ``rnnkit.distributed: rank 1 failed in fit: epoch 1/3, batch 3/4: ValueError: ...``.
    """

    def __init__(self, what: str, failures: dict[int, str], rank: int, size: int) -> None:
        if not isinstance(failures, dict) or not all(isinstance(r, int) for r in failures):
            raise InvalidParameterError(f"DistributedError: failures must be a dict rank (int) -> text, got "
                                        f"{show(failures)} ({type(failures).__name__})")
        self.failures = dict(failures)
        self.rank = rank
        self.size = size
        ranks = sorted(self.failures)
        notes = [self.failures[r] for r in ranks]
        head = (f"rank {ranks[0]} failed" if len(ranks) == 1
                else f"ranks {', '.join(map(str, ranks))} failed")
        if not notes:
            body = "(no detail)"
        elif len(set(notes)) == 1:
            body = notes[0]
        else:
            body = "; ".join(f"rank {r}: {n}" for r, n in zip(ranks, notes, strict=True))
        super().__init__(f"rnnkit.distributed: {head} in {what}: {body} "
                         f"(raised on rank {rank} of {size})")
