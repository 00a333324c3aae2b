#!/usr/bin/env bash
# Run the kernel-contract tests at the lowest and at the highest Numba that pyproject.toml allows
# ("numba>=LO,<HI"), each in a fresh virtual environment of its own (the working environment is
# not touched): pip resolves numpy and llvmlite to what that Numba supports, rnnkit runs from
# src/ (PYTHONPATH), Numba caches into a temporary directory. Only the files that exercise
# Numba's internals and the compiled step's contract run (about 2-4 minutes per version on a
# loaded 2-core machine, most of it the kernels' first compile):
#   tests/test_numba_private.py   every use of Numba's / llvmlite's non-public API
#   tests/test_step_interface.py  the compiled step's declared interface
#   tests/test_cell_forms.py      compiled step vs reference vs parallel form (rnnkit.testing.check_cell)
#   tests/test_kernels_quick.py   the prepared inference call against the NumPy reference
# Usage: tools/numba_bounds.sh [lowest|highest|both]   (default: both)
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python}"
spec="$("$PY" - <<'PY'
import re, tomllib
deps = tomllib.load(open("pyproject.toml", "rb"))["project"]["dependencies"]
(numba,) = [d for d in deps if re.match(r"numba\b", d)]
lo = re.search(r">=\s*([\d.]+)", numba)
hi = re.search(r"<\s*([\d.]+)", numba)
if not (lo and hi):
    raise SystemExit(f"pyproject.toml: numba must be bounded both ways (numba>=LO,<HI), got {numba!r}")
print(f"numba=={lo.group(1)} numba>={lo.group(1)},<{hi.group(1)}")
PY
)"
read -r lowest highest <<<"$spec"
FILES=(tests/test_numba_private.py tests/test_step_interface.py tests/test_cell_forms.py tests/test_kernels_quick.py)
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
run() {   # run NAME REQUIREMENT
    local env="$work/$1"
    "$PY" -m venv "$env"
    "$env/bin/pip" install -q "$2" "safetensors>=0.4" "tqdm>=4.60" pytest pytest-timeout hypothesis
    "$env/bin/python" -c 'import numba, numpy; print(f"{numba.__version__=} {numpy.__version__=}")'
    NUMBA_CACHE_DIR="$work/cache-$1" PYTHONPATH="$PWD/src" "$env/bin/python" -m pytest -q -p no:cacheprovider \
        "${FILES[@]}"
}
case "${1:-both}" in
    lowest) run lowest "$lowest" ;;
    highest) run highest "$highest" ;;
    both) run lowest "$lowest"; run highest "$highest" ;;
    *) echo "usage: $0 [lowest|highest|both]" >&2; exit 2 ;;
esac
