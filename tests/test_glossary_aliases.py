"""The user guide's glossary and its table of aliases.

Glossary: every term it defines is a word the code or the rest of the guide uses. Aliases: the
table in ``docs/aliases.md`` is :data:`rnnkit.models._aliases.ALIASES` row for row, every alias
in it exists, every public name bound to the same class or function as another public name is
in it, and the rest of the guide uses none of them (one spelling per task)."""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import rnnkit as rk
from rnnkit.models._aliases import ALIASES
from rnnkit.models._base import Model as AnyModel

#: what a table row's leading class name means (``Model``: every rnnkit model, whose base this is)
CLASSES = {"rk": rk, "Model": AnyModel, "Layer": rk.Layer, "RecurrentLayer": rk.RecurrentLayer,
           "Shape": rk.Shape}

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
ROW = re.compile(r"^\| `?(.+?)`? \| (.+?) \|$", re.M)


def _rows(page: str) -> list[tuple[str, str]]:
    rows = ROW.findall((DOCS / page).read_text())
    return [(a, b) for a, b in rows if a not in ("term", "alias") and not set(a) <= {"-", "|"}]


def _guide(but: tuple[str, ...]) -> str:
    return "\n".join(p.read_text() for p in sorted(DOCS.glob("*.md")) if p.name not in but)


def test_the_index_links_both_pages() -> None:
    index = (DOCS / "index.md").read_text()
    assert "(glossary.md)" in index and "(aliases.md)" in index


def test_every_glossary_term_is_used_in_the_code_or_the_guide() -> None:
    terms = [t.strip("`") for t, _ in _rows("glossary.md")]
    assert len(terms) >= 10 and {"Ctx", "tape", "cell", "walker", "step", "packed weights", "stateful",
                                  "stream", "servable", "plan"} <= set(terms)
    text = _guide(("glossary.md",)) + "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    for term in terms:
        assert re.search(rf"\b{re.escape(term)}\b", text, re.I), f"glossary term {term!r} is used nowhere"


def _resolve(alias: str) -> Any:
    """The object an alias's leading dotted name names (``rk.X.Y`` or ``Class.method``)."""
    m = re.match(r"[\w.]+", alias)
    assert m is not None, alias
    parts = m.group(0).split(".")
    obj: Any = CLASSES[parts[0]]
    for p in parts[1:]:
        obj = getattr(obj, p)
    return obj


def test_the_table_is_the_code_list_row_for_row() -> None:
    rows = _rows("aliases.md")
    assert [a for a, _ in rows] == list(ALIASES)
    for alias, canonical in rows:
        assert ALIASES[alias] in canonical.replace("`", ""), (alias, canonical)
        assert _resolve(alias) is not None


def test_every_second_public_name_of_one_object_is_in_the_table() -> None:
    """Public modules of rnnkit: a class or function reachable under two public names has all
    but its own ``__name__`` listed as aliases."""
    mods = {"rk": rk, **{f"rk.{n}": m for n, m in vars(rk).items() if inspect.ismodule(m)
                         and not n.startswith("_") and m.__name__.startswith("rnnkit.")}}
    listed = {re.match(r"[\w.]+", a).group(0).rsplit(".", 1)[-1] for a in ALIASES}  # type: ignore[union-attr]
    names: dict[int, tuple[Any, set[str]]] = {}
    for mod in mods.values():
        for n in getattr(mod, "__all__", [n for n in dir(mod) if not n.startswith("_")]):
            obj = getattr(mod, n, None)
            if inspect.isclass(obj) or inspect.isfunction(obj):
                names.setdefault(id(obj), (obj, set()))[1].add(n)
    found = {n for obj, ns in names.values() if len(ns) > 1 for n in ns if n != obj.__name__}
    assert found, "the scan finds the known aliases"
    assert found <= listed, f"aliases missing from docs/aliases.md: {sorted(found - listed)}"


def test_the_guide_uses_one_spelling() -> None:
    """No page but the table uses an alias (``RecurrentLayer(cell)`` is the canonical way to run
    a custom cell; only its use for a built-in cell is the alias, which the table explains)."""
    text = _guide(("aliases.md", "glossary.md"))
    for alias in ALIASES:
        if alias.startswith("rk.RecurrentLayer("):
            continue
        name = re.match(r"[\w.]+", alias).group(0).rsplit(".", 1)[-1]  # type: ignore[union-attr]
        assert not re.search(rf"\b{name}\b", text), f"the guide spells {alias!r}; use {ALIASES[alias]!r}"
