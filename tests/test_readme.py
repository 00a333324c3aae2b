"""Every ~~~python block of README.md runs, each in a fresh namespace, in a temporary folder.
(README fences its code with tildes so that its ``` fences hold only the two set-up commands.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"^~~~python\n(.*?)^~~~", README.read_text(encoding="utf-8"), re.S | re.M)


def test_readme_has_the_sequential_and_graph_examples() -> None:
    text = "\n".join(BLOCKS)
    assert len(BLOCKS) >= 3 and "SequentialBuilder" in text and "GraphBuilder" in text


@pytest.mark.parametrize("k", range(len(BLOCKS)))
def test_readme_block_runs(k: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    exec(compile(BLOCKS[k], f"README.md python block {k}", "exec"), {"__name__": "__readme__"})
