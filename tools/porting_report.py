"""Side-by-side report of the ported examples under ``examples/porting``.

Each example directory holds ``original.py`` (the published example, trimmed to run in well
under a minute), ``rnnkit_port.py`` (the rnnkit port against this checkout) and, where written,
``rnnkit_port_before.py`` (the port against an older checkout, run with that checkout's
``src`` first on ``PYTHONPATH``). Each file writes its loss per epoch or step as a JSON list to
``$PORTING_OUT/<stem>.<kind>.json``; the original also writes the initial weights the ports load.

**Edits** are the lines of a port that differ from the original after a mechanical rename of
the import (``keras.layers.`` / ``keras.`` / ``layers.`` -> ``rk.``, ``import keras`` /
``from keras import layers`` -> ``import rnnkit as rk``), counted with :mod:`difflib` over the
code lines: lines ending in ``# harness`` (sizes, seeds, weight transfer, loss records), blank
lines, comment lines, trailing comments and the module docstring are left out. A replaced block
counts as many edits as the longer of its two sides.

    python tools/porting_report.py                 # every example, full size
    python tools/porting_report.py --tiny --only time_sequence_prediction
    python tools/porting_report.py --before /path/to/older/checkout   # also run the "before" ports
    python tools/porting_report.py --no-run        # edit counts only
"""

from __future__ import annotations

import argparse
import ast
import difflib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES_DIR = ROOT / "examples" / "porting"

#: example directory -> (stem of its JSON files, extra environment for all of its runs)
EXAMPLES: dict[str, tuple[str, dict[str, str]]] = {
    "addition_rnn": ("addition_rnn", {}),
    "timeseries_weather_forecasting": ("weather", {}),
    "time_sequence_prediction": ("sine", {"PORTING_OPTIM": "adam"}),
    "bidirectional_lstm_imdb": ("imdb", {}),
    "lstm_character_level_text_generation": ("charlm", {}),
    "lstm_seq2seq": ("s2s", {}),
    "word_language_model": ("wlm", {}),
    "seq2seq_translation": ("translate", {}),
}

_RENAMES = [(re.compile(r"\bkeras\.layers\."), "rk."), (re.compile(r"\bkeras\."), "rk."),
            (re.compile(r"(?<![\w.])layers\."), "rk.")]
_IMPORTS = {"import keras": "import rnnkit as rk", "from keras import layers": "import rnnkit as rk"}


def _docstring_lines(source: str) -> set[int]:
    """1-based line numbers of the module docstring (empty when there is none)."""
    body = ast.parse(source).body
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
            and isinstance(body[0].value.value, str):
        end = body[0].end_lineno if body[0].end_lineno is not None else body[0].lineno
        return set(range(body[0].lineno, end + 1))
    return set()


def code_lines(source: str, *, rename: bool) -> list[str]:
    """The lines of ``source`` that count for edits (see the module doc), stripped of trailing
    comments and outer whitespace; ``rename`` applies the mechanical Keras -> rnnkit rename."""
    skip = _docstring_lines(source)
    out: list[str] = []
    for no, raw in enumerate(source.splitlines(), 1):
        line = raw.strip()
        if no in skip or not line or line.startswith("#") or line.endswith("# harness") \
                or "# harness:" in line:
            continue
        line = re.sub(r"\s+#[^\"']*$", "", line)  # a trailing comment (not one inside a string)
        if rename:
            line = _IMPORTS.get(line, line)
            for pattern, repl in _RENAMES:
                line = pattern.sub(repl, line)
        out.append(line)
    first = out.index("import rnnkit as rk") if "import rnnkit as rk" in out else -1
    return [x for i, x in enumerate(out) if x != "import rnnkit as rk" or i == first]


def count_edits(original: str, port: str) -> tuple[int, list[str]]:
    """(number of edits, a unified diff of the counted lines) from ``original`` to ``port``."""
    a, b = code_lines(original, rename=True), code_lines(port, rename=False)
    n = 0
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if tag != "equal":
            n += max(i2 - i1, j2 - j1)
    diff = [d for d in difflib.unified_diff(a, b, "original", "port", n=0, lineterm="")
            if not d.startswith("@@")]
    return n, diff


def run_file(path: Path, out: Path, env_extra: dict[str, str], src: Path, tiny: bool,
             timeout: float) -> None:
    """Run one example file with ``src`` first on PYTHONPATH; raises on a non-zero exit."""
    env = dict(os.environ, PORTING_OUT=str(out), PYTHONPATH=str(src), **env_extra)
    if tiny:
        env["PORTING_TINY"] = "1"
    proc = subprocess.run([sys.executable, str(path)], cwd=path.parent, env=env, timeout=timeout,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"{path} exited with {proc.returncode}:\n{proc.stderr[-3000:]}")


def compare(a: list[float], b: list[float]) -> dict[str, float]:
    """First and last values of both curves and the largest |a - b| over their common length."""
    if len(a) != len(b) or not a:
        raise ValueError(f"curves of different lengths or empty: {len(a)} vs {len(b)}")
    return {"first_original": a[0], "first_port": b[0], "last_original": a[-1],
            "last_port": b[-1], "max_abs_diff": max(abs(x - y) for x, y in zip(a, b, strict=True))}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", help="an example directory name (repeatable)")
    ap.add_argument("--tiny", action="store_true", help="PORTING_TINY=1: the smallest sizes")
    ap.add_argument("--no-run", action="store_true", help="edit counts only")
    ap.add_argument("--before", type=Path, help="an older checkout to run rnnkit_port_before.py in")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per run")
    args = ap.parse_args(argv)
    names = args.only or sorted(p.name for p in EXAMPLES_DIR.iterdir() if (p / "original.py").is_file())
    for name in names:
        d = EXAMPLES_DIR / name
        stem, extra = EXAMPLES.get(name, (name, {}))
        original = (d / "original.py").read_text()
        line = [f"{name}:"]
        kinds = [("port", d / "rnnkit_port.py", ROOT / "src")]
        if (d / "rnnkit_port_before.py").is_file():
            kinds.insert(0, ("port_before", d / "rnnkit_port_before.py",
                             (args.before or ROOT) / "src"))
        for kind, path, _ in kinds:
            n, _diff = count_edits(original, path.read_text())
            line.append(f"edits {'before' if kind == 'port_before' else 'after'} {n}")
        print(" ".join(line))
        if args.no_run:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            out = Path(tmp)
            run_file(d / "original.py", out, extra, ROOT / "src", args.tiny, args.timeout)
            curves = {"original": json.loads((out / f"{stem}.original.json").read_text())}
            for kind, path, src in kinds:
                if kind == "port_before" and args.before is None:
                    continue
                run_file(path, out, extra, src, args.tiny, args.timeout)
                curves[kind] = json.loads((out / f"{stem}.{kind}.json").read_text())
        for kind in [k for k in curves if k != "original"]:
            c = compare(curves["original"], curves[kind])
            print(f"  {kind:12s} first {c['first_original']:.6f} / {c['first_port']:.6f}  last "
                  f"{c['last_original']:.6f} / {c['last_port']:.6f}  max|diff| {c['max_abs_diff']:.2e}")
            for i, (x, y) in enumerate(zip(curves["original"], curves[kind], strict=True)):
                print(f"    {i:3d}  {x:.6f}  {y:.6f}  {abs(x - y):.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
