"""Shared pytest fixtures. The layer harness itself lives in ``tests/harness.py``
(``from harness import check_layer``; pytest puts ``tests/`` on ``sys.path``)."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import rnnkit as rk

TESTS = Path(__file__).resolve().parent
if str(TESTS) not in sys.path:  # so `import harness` works whatever the import mode
    sys.path.insert(0, str(TESTS))

#: the test data folder (fixtures written by the scripts in tools/)
DATA = TESTS / "data"

try:  # property tests (tests/test_fuzz.py): a small profile by default, a long one on request
    from hypothesis import settings as _hyp_settings

    _hyp_settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                                   print_blob=True)
    _hyp_settings.register_profile("long", max_examples=10000, deadline=None, print_blob=True)
    _hyp_settings.load_profile(os.environ.get("RNNKIT_FUZZ", "ci"))
except ImportError:  # hypothesis is in the test extra; without it test_fuzz.py skips
    pass


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh, seeded generator per test."""
    return np.random.default_rng(1234)


@pytest.fixture(autouse=True)
def _no_global_seed_leak() -> Iterator[None]:
    """A test that sets the global seed does not leak it into the next test."""
    yield
    rk.set_global_seed(None)
