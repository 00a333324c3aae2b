"""Every ```python block of the user guide (docs/*.md) runs; the blocks of one page run in order
in one namespace. Every ``rnnkit ...`` line of a ```bash block parses with the real parser."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

DOCS = Path(__file__).resolve().parents[1] / "docs"
PAGES = sorted(DOCS.glob("*.md"))
FENCE = re.compile(r"^```(\w+)\n(.*?)^```$", re.S | re.M)


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
        try:
            exec(compile(code, f"{page.name}[python block {k}]", "exec"), namespace)
        except Exception as e:  # pragma: no cover - the message says which block failed
            raise AssertionError(
                f"{page.name}: python block {k} failed: {type(e).__name__}: {e}\n{code}"
            ) from e
    capsys.readouterr()


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
