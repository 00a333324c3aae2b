"""Value semantics from ``get_config()`` for the small configured objects (regularizers,
constraints): equal when the same class with the same config, hashable, and a repr that reads
back as the constructor call."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import MethodNotImplementedError


class ConfigValue:
    """Equality, hash and repr of an object whose ``get_config()`` says all that defines it."""

    def get_config(self) -> dict[str, Any]:
        raise MethodNotImplementedError(f"{type(self).__name__}.get_config is not implemented; a "
                                        f"subclass provides it")

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and isinstance(other, ConfigValue) \
            and other.get_config() == self.get_config()

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.get_config().items()))))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{k}={v!r}' for k, v in self.get_config().items())})"
