"""The ``rnnkit`` command line (console script ``rnnkit``, also ``python -m rnnkit``).

``main(argv=None) -> int`` runs it; see :mod:`rnnkit.cli._main` for the commands and the
error contract (bad input: one line on stderr, exit status 2).
"""

from rnnkit.cli._main import build_parser, main

__all__ = ["build_parser", "main"]
