"""Cell classes by name, so a ``RecurrentLayer`` over any registered cell saves and loads."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError
from rnnkit.recurrent._cell import Cell

_CELLS: dict[str, type[Cell]] = {}


def register_cell(cls: type[Cell]) -> type[Cell]:
    """Make a Cell subclass loadable from a model file (usable as a decorator). Its
    ``get_config()`` must return the keyword arguments of its constructor."""
    if not (isinstance(cls, type) and issubclass(cls, Cell)):
        raise InvalidInputError(f"register_cell: expected a Cell subclass, got {cls!r}")
    _CELLS[cls.__name__] = cls
    return cls


def cell_to_config(cell: Cell) -> dict[str, Any]:
    name = type(cell).__name__
    if _CELLS.get(name) is not type(cell):
        raise InvalidInputError(
            f"cell_to_config: {name} is not a registered cell class; call "
            f"rnnkit.register_cell({name}) first")
    return {"class_name": name, "config": cell.get_config()}


def cell_from_config(cfg: Any) -> Cell:
    if not isinstance(cfg, dict) or not isinstance(cfg.get("class_name"), str) \
            or not isinstance(cfg.get("config", {}), dict):
        raise InvalidInputError(
            f"cell_from_config: expected {{'class_name': str, 'config': dict}}, got {cfg!r}")
    cls = _CELLS.get(cfg["class_name"])
    if cls is None:
        raise InvalidInputError(
            f"cell_from_config: unknown cell class {cfg['class_name']!r}; known: {sorted(_CELLS)}")
    try:
        return cls.from_config(cfg.get("config", {}))
    except TypeError as e:
        raise InvalidInputError(f"cell_from_config: bad config for {cfg['class_name']}: {e}") from None
