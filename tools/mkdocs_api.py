"""The API reference pages of the documentation site, generated at build time from ``__all__``.

Used by ``mkdocs.yml`` as a hook: :func:`on_files` adds one page per public module (``rnnkit``
and every public subpackage or module of it, i.e. one whose name does not start with ``_`` and
that defines ``__all__``) under ``api/``. Each name of the module's ``__all__`` gets an entry:
rendered from its docstring by mkdocstrings the first time the object appears, and a link to
that entry where a later module re-exports the same object. A name added to ``__all__`` later
is therefore on the site without editing any page.
"""

from __future__ import annotations

import importlib
import pkgutil
import types
from typing import Any

import rnnkit

#: the folder of the generated pages, inside the site
FOLDER = "api"


def public_modules() -> list[str]:
    """``rnnkit`` and its public submodules with an ``__all__``, in name order after ``rnnkit``."""
    names = ["rnnkit"]
    for info in sorted(pkgutil.iter_modules(rnnkit.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        mod = importlib.import_module(f"rnnkit.{info.name}")
        if getattr(mod, "__all__", None):
            names.append(mod.__name__)
    return names


def page_name(module: str) -> str:
    return f"{FOLDER}/{module}.md"


def pages() -> dict[str, str]:
    """Page path (inside the docs folder) -> Markdown, for every public module."""
    first: dict[int, tuple[str, str]] = {}       # id(object) -> (page, qualified name)
    out: dict[str, str] = {}
    for module in public_modules():
        mod = importlib.import_module(module)
        summary = (mod.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")
        lines = [f"# `{module}`", "", summary, ""]
        for name in mod.__all__:
            obj: Any = getattr(mod, name)
            qual = f"{module}.{name}"
            if isinstance(obj, types.ModuleType):          # a subpackage: its own page
                see = f"The module; see [`{obj.__name__}`]({obj.__name__}.md)."
                lines += [f"## `{qual}` {{#{qual}}}", "", see, ""]
                continue
            seen = first.get(id(obj)) if not isinstance(obj, (int, float, str, tuple, bool)) else None
            if seen is None:
                first[id(obj)] = (page_name(module), qual)
                lines += [f"::: {qual}", "    options:", "      heading_level: 2", ""]
            else:
                where, other = seen
                link = f"{where.rsplit('/', 1)[-1]}#{other}"
                lines += [f"## `{qual}` {{#{qual}}}", "", f"The same object as [`{other}`]({link}).", ""]
        out[page_name(module)] = "\n".join(lines)
    index = ["# API reference", "", "Every public name, one page per module, generated from the "
             "modules' `__all__` and their docstrings.", ""]
    index += [f"- [`{m}`]({m}.md)" for m in public_modules()]
    out[f"{FOLDER}/index.md"] = "\n".join(index) + "\n"
    return out


def on_config(config: Any) -> Any:
    """mkdocs hook: the API pages under "API reference" in the navigation."""
    entry = {"API reference": [f"{FOLDER}/index.md"] + [page_name(m) for m in public_modules()]}
    config["nav"] = [item for item in (config["nav"] or []) if "API reference" not in item] + [entry]
    return config


def on_files(files: Any, config: Any) -> Any:
    """mkdocs hook: add the generated pages to the site's files."""
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files
