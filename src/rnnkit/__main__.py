"""``python -m rnnkit``: the command line (same as the ``rnnkit`` console script)."""

import sys

from rnnkit.cli import main

if __name__ == "__main__":
    sys.exit(main())
