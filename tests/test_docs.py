"""Every ```python block of the user guide (docs/*.md) runs; the blocks of one page run in order
in one namespace, and a page whose blocks do not each run alone says so once, at its top. Every
block can be pasted into the interactive prompt as it is (no blank line inside an indented
body, a blank line after each one before the next statement). A
block that needs an optional package (torch, keras, h5py, matplotlib, onnx) that is not installed
skips the rest of its page. Every ``rnnkit ...`` line of a ```bash block parses with the real
parser, and the ones that need no network, no PyTorch and little time run as written."""

from __future__ import annotations

import codeop
import importlib
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)
IN_ORDER = "The code blocks on this page run in order"
OPTIONAL = ("torch", "keras", "h5py", "matplotlib", "onnx", "onnxruntime")
#: what an ``rnnkit convert`` line needs, by the suffix of a file it names
CONVERT_NEEDS = {".onnx": "onnx", ".keras": "h5py", ".h5": "h5py"}


def _missing_optional(code: str) -> str | None:
    """The first optional package the block imports that cannot be imported here."""
    for mod in OPTIONAL:
        if re.search(rf"^\s*(import|from) {mod}\b", code, re.M):
            if mod == "keras":
                os.environ.setdefault("KERAS_BACKEND", "torch")
            try:
                importlib.import_module(mod)
            except Exception as e:  # noqa: BLE001 - not installed, or installed without a backend
                return f"{mod} ({type(e).__name__}: {e})"
    return None


def _importable(mod: str) -> bool:
    try:
        importlib.import_module(mod)
    except Exception:  # noqa: BLE001 - not installed (or blocked)
        return False
    return True


def blocks(page: Path, lang: str) -> list[str]:
    return [m.group(2) for m in FENCE.finditer(page.read_text()) if m.group(1) == lang]


def test_the_guide_has_its_pages() -> None:
    names = {p.name for p in PAGES}
    assert {"index.md", "recurrent-layers.md", "cli.md", "file-formats.md"} <= names
    assert sum(len(blocks(p, "python")) for p in PAGES) >= 15


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.name)
def test_python_blocks_run(page: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)                   # blocks that write files write them here
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict[str, object] = {"__name__": f"docs_{page.stem}"}
    for k, code in enumerate(blocks(page, "python")):
        missing = _missing_optional(code)
        if missing is not None:
            capsys.readouterr()
            pytest.skip(f"{page.name}: python block {k} and later need {missing}, not installed")
        try:
            exec(compile(code, f"{page.name}[python block {k}]", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message says which block failed
            raise AssertionError(
                f"{page.name}: python block {k} failed: {type(e).__name__}: {e}\n{code}"
            ) from e
    capsys.readouterr()
    left = sorted(p.name for p in tmp_path.iterdir())
    assert not left, (f"{page.name} writes {left} into the reader's current directory; "
                      f"its examples should write into a temporary directory")


def paste_error(code: str) -> str | None:
    """What the interactive prompt says when ``code`` is pasted into it line by line, or None.
    Like the prompt, each line is added to the statement being typed, which runs as soon as it
    is complete (``codeop``, what ``code.InteractiveConsole`` uses): a blank line inside a
    function or class body ends it early, and a statement right after an indented block, with
    no blank line between, is a syntax error."""
    typed: list[str] = []
    for n, line in enumerate(code.splitlines(), 1):
        typed.append(line)
        try:
            done = codeop.compile_command("\n".join(typed), "<stdin>", "single")
        except (SyntaxError, OverflowError, ValueError) as e:
            return f"line {n}: {getattr(e, 'msg', e)}: {line!r}"
        if done is not None:
            typed = []
    return None


def test_paste_error_is_the_prompts() -> None:
    assert paste_error("x = 1\nfor i in range(2):\n    x += i\n\nprint(x)\n") is None
    assert paste_error('s = """a\n\nb"""\n') is None                     # a blank line in a string
    assert "unexpected indent" in str(paste_error("class A:\n    a = 1\n\n    b = 2\n"))
    assert "line 3" in str(paste_error("for i in range(2):\n    pass\nx = 1\n"))


@pytest.mark.parametrize("page", [p for p in PAGES if blocks(p, "python")], ids=lambda p: p.name)
def test_python_blocks_paste_into_the_interactive_prompt(page: Path) -> None:
    for k, code in enumerate(blocks(page, "python")):
        err = paste_error(code)
        assert err is None, f"{page.name}: python block {k} cannot be pasted into the prompt: {err}"


def test_cli_lines_in_bash_blocks_parse() -> None:
    from rnnkit.cli import build_parser

    parser = build_parser()
    seen = 0
    for page in PAGES:
        for code in blocks(page, "bash"):
            for line in code.splitlines():
                line = re.split(r"\s[|>]\s|\s#", line)[0].strip()     # drop pipes, redirects, comments
                if not line.startswith("rnnkit ") or line.startswith("rnnkit bench"):
                    continue
                try:
                    parser.parse_args(shlex.split(line)[1:])
                except SystemExit as e:
                    raise AssertionError(f"{page.name}: {line!r} does not parse (exit {e.code})") from None
                seen += 1
    assert seen >= 5


def _intro(page: Path) -> str:
    """The page's text before its first code block."""
    text = page.read_text()
    return text[: text.find("```")]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_blocks_run_alone_or_the_page_says_they_run_in_order(page: Path, tmp_path: Path) -> None:
    code = blocks(page, "python")
    says = IN_ORDER in _intro(page)
    assert page.read_text().count(IN_ORDER) <= 1, f"{page.name}: says it more than once"
    if says or len(code) < 2:
        assert not says or len(code) >= 2, f"{page.name}: the note is there but the page has < 2 blocks"
        return
    for k, block in enumerate(code):  # no note: each block must run alone, in a fresh process
        if _missing_optional(block):
            continue
        r = subprocess.run([sys.executable, "-c", block], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300, env={**os.environ, "MPLBACKEND": "Agg"})
        assert r.returncode == 0, f"{page.name}: python block {k} fails alone:\n{r.stderr[-800:]}"


def _cli_lines(page: Path) -> list[str]:
    out = []
    for code in blocks(page, "bash"):
        for line in code.splitlines():
            if line.strip().startswith("rnnkit "):
                out.append(line.strip())
    return out


def test_cli_page_commands_run_as_written_from_an_empty_folder(tmp_path: Path) -> None:
    """The quick commands of docs/cli.md, in page order, from an empty folder (bundled data sets
    by name); the expected exit status is the one the page's comment states (default 0)."""
    from rnnkit.cli import main

    ran = 0
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for line in _cli_lines(DOCS / "cli.md"):
            cmd, _, comment = line.partition("#")
            if cmd.startswith(("rnnkit bench", "rnnkit demo")) or "--epochs 15" in cmd:
                continue  # needs torch / the demo runs in test_cli / ~20 s
            argv = shlex.split(cmd)[1:]
            needs = {m for a in argv for sfx, m in CONVERT_NEEDS.items() if a.endswith(sfx)}
            if argv[:1] == ["convert"] and not all(_importable(m) for m in needs):
                continue  # an optional package the conversion needs is not installed
            if argv[:1] == ["train"] and "--epochs" not in argv:
                argv += ["--epochs", "3"]  # the command as written, only shorter
            want = 2 if "exit 2" in comment else 0
            assert main(argv) == want, line
            ran += 1
    finally:
        os.chdir(cwd)
    assert ran >= 5
