"""``fit``'s progress bar (``verbose=1``)."""

from __future__ import annotations

from tqdm import tqdm

from rnnkit import kernels


class EpochBar:
    """It counts completed epochs, shows the last logs, leaves the time spent compiling kernels
    out of its rate and estimates, shows the optimizer steps of the last epoch (``steps=1``: a
    full-batch epoch), and ends where training stops (an early stop makes its total
    the epochs run). ``verbose`` other than 1 shows nothing."""

    def __init__(self, name: str, epochs: int, initial: int, verbose: int) -> None:
        self.bar = None if verbose != 1 else tqdm(total=int(epochs), initial=int(initial), desc=name,
                                                  unit="epoch", dynamic_ncols=True)
        self.compiled = kernels.compile_seconds()

    def epoch_done(self, logs: dict[str, float], stop: bool, steps: int | None = None) -> None:
        """One epoch ended after ``steps`` optimizer steps (shown first, as ``steps=1`` for a
        full-batch epoch), with ``logs``."""
        bar = self.bar
        if bar is None:
            return
        shown = {} if steps is None else {"steps": str(steps)}
        bar.set_postfix({**shown, **{k: f"{v:.4g}" for k, v in logs.items()}}, refresh=False)
        now = kernels.compile_seconds()   # compiling kernels is not training time
        bar.start_t += now - self.compiled
        bar.last_print_t += now - self.compiled
        self.compiled = now
        bar.update(1)
        if stop:
            bar.total = bar.n

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
