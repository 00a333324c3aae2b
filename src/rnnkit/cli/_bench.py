"""``rnnkit bench [ARGS...]``: run the side-by-side benchmark against PyTorch.

The benchmark is ``benchmarks/bench.py`` of the source checkout (it is not part of an installed
wheel); every argument after ``bench`` goes to it (``rnnkit bench --help`` shows them). It needs
PyTorch; without it the command says so in one line and exits with status 2.

Its results file goes to :data:`RESULTS_DIR` (``./rnnkit_out/bench/``, relative to the current
folder) unless ``--results DIR`` says where, so running it from an installed or editable package
never writes into the checkout. ``--update-latest`` (replacing the tracked reference
``benchmarks/results/latest.json``) without ``--results`` writes beside the script, as meant.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

from rnnkit.cli._common import CliError

#: where ``rnnkit bench`` writes its results unless told otherwise (relative to the cwd)
RESULTS_DIR = Path("rnnkit_out") / "bench"


def bench_args(argv: list[str]) -> list[str]:
    """``argv`` with ``--results ./rnnkit_out/bench`` added when it names no results folder,
    saves results and does not update the tracked reference."""
    given = {a.split("=", 1)[0] for a in argv}
    if given & {"--results", "--no-save", "--update-latest", "--markdown", "-h", "--help"}:
        return list(argv)
    return [*argv, "--results", str(Path.cwd() / RESULTS_DIR)]


def find_bench_script() -> Path:
    """``$RNNKIT_BENCH``, else ``benchmarks/bench.py`` beside the source tree, else in the cwd."""
    env = os.environ.get("RNNKIT_BENCH")
    candidates = [Path(env)] if env else []
    candidates += [Path(__file__).resolve().parents[3] / "benchmarks" / "bench.py",
                   Path.cwd() / "benchmarks" / "bench.py"]
    for c in candidates:
        if c.is_file():
            return c
    raise CliError("benchmark script benchmarks/bench.py not found (it ships with the source "
                   "checkout, not the installed package); run from the repository or set RNNKIT_BENCH")


def run_bench(argv: list[str]) -> int:
    try:
        import torch  # noqa: F401
    except ImportError as e:
        raise CliError(f"rnnkit bench compares against PyTorch, which is not installed ({e}); "
                       "install it with: pip install torch") from None
    script = find_bench_script()
    spec = importlib.util.spec_from_file_location("rnnkit_bench_script", script)
    if spec is None or spec.loader is None:
        raise CliError(f"{script}: cannot be loaded as a Python module")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "main"):
        raise CliError(f"{script}: has no main(argv) function")
    import sys

    old = sys.argv[0]
    sys.argv[0] = "rnnkit bench"  # the script's argparse names itself after argv[0]
    try:
        return int(module.main(bench_args(argv)) or 0)
    finally:
        sys.argv[0] = old
