"""Cell classes by key, so a ``RecurrentLayer`` over any registered cell saves and loads.

A cell class's key is its module-qualified name (``"mypkg.cells.MinGRUCell"``), except for
rnnkit's own cells, whose key is their bare class name (``"LSTMCell"``, what every file holds).
A model file holds the key under ``class_name``. Keys cannot collide silently: registering a
second, different class under a key already taken is refused (registering the same class again
does nothing, and a definition run again from the same source lines, as a notebook cell or a
reloaded module runs it, replaces the class it defined before). A file that holds a bare name
that is not a built-in (written before keys were qualified) loads the one registered class of
that name, and is refused, naming the candidates, when several registered classes share it.
"""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError, InvalidParameterError
from rnnkit.recurrent._cell import Cell

_CELLS: dict[str, type[Cell]] = {}


def cell_key(cls: type[Cell]) -> str:
    """The registry key of ``cls`` (see the module docstring)."""
    if cls.__module__.split(".")[0] == "rnnkit":
        return cls.__name__
    return f"{cls.__module__}.{cls.__qualname__}"


def register_cell(cls: type[Cell]) -> type[Cell]:
    """Make a Cell subclass loadable from a model file (usable as a decorator), under
    :func:`cell_key`. Its ``get_config()`` must return the keyword arguments of its
    constructor. A different class already registered under the same key is an
    :class:`~rnnkit.InvalidParameterError` (rename or move one of them)."""
    if not (isinstance(cls, type) and issubclass(cls, Cell)):
        raise InvalidInputError(f"register_cell: expected a Cell subclass, got {cls!r}")
    key = cell_key(cls)
    held = _CELLS.get(key)
    if held is not None and held is not cls and (_source(held) is None or _source(held) != _source(cls)):
        raise InvalidParameterError(
            f"register_cell: the key {key!r} is already taken by another class ({held!r}, defined at "
            f"{_where(held)}); expected a class whose module-qualified name is not registered yet, got "
            f"{cls!r} (defined at {_where(cls)}). Give one of them another name or module")
    _CELLS[key] = cls
    return cls


def _source(cls: type) -> frozenset[tuple[str, int]] | None:
    """Where the functions ``cls`` defines itself were written (file, first line): equal for two
    runs of one class statement, different for two class statements. None when it defines none
    (then two classes under one key are told apart by nothing, and refused)."""
    where = frozenset((f.__code__.co_filename, f.__code__.co_firstlineno)
                      for f in vars(cls).values() if hasattr(f, "__code__"))
    return where or None


def _where(cls: type) -> str:
    where = _source(cls)
    if where is None:
        return cls.__module__
    file, line = min(where)
    return f"{file}:{line}"


def cell_to_config(cell: Cell) -> dict[str, Any]:
    key = cell_key(type(cell))
    if _CELLS.get(key) is not type(cell):
        name = type(cell).__name__
        raise InvalidInputError(
            f"cell_to_config: {key} is not a registered cell class; call "
            f"rnnkit.register_cell({name}) first")
    return {"class_name": key, "config": cell.get_config()}


def _lookup(name: str) -> type[Cell]:
    cls = _CELLS.get(name)
    if cls is not None:
        return cls
    bare = [c for k, c in _CELLS.items() if "." not in name and k.rsplit(".", 1)[-1] == name]
    if len(bare) == 1:    # a file written before the keys were qualified
        return bare[0]
    if bare:
        raise InvalidInputError(
            f"cell_from_config: the cell class name {name!r} (a file written before cell keys were "
            f"module-qualified) matches several registered classes {sorted(cell_key(c) for c in bare)}; "
            f"expected one. Write the file's class_name as one of these keys")
    raise InvalidInputError(
        f"cell_from_config: unknown cell class {name!r}; known: {sorted(_CELLS)}")


def cell_from_config(cfg: Any) -> Cell:
    if not isinstance(cfg, dict) or not isinstance(cfg.get("class_name"), str) \
            or not isinstance(cfg.get("config", {}), dict):
        raise InvalidInputError(
            f"cell_from_config: expected {{'class_name': str, 'config': dict}}, got {cfg!r}")
    cls = _lookup(cfg["class_name"])
    try:
        return cls.from_config(cfg.get("config", {}))
    except TypeError as e:
        raise InvalidInputError(f"cell_from_config: bad config for {cfg['class_name']}: {e}") from None
