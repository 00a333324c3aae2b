"""What a layer remembers of its calls on graph nodes (Keras' functional API): the nodes each
call read and made, for ``layer.input`` / ``layer.output``."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import GraphCallError


class GraphCalls:
    """The part of :class:`~rnnkit.Layer` that records its calls on graph nodes."""

    name: str

    def _record_call(self, inputs: Any, outputs: Any) -> None:
        """Note a call on graph nodes (nodes read, node(s) made) for :attr:`input` / :attr:`output`."""
        self.__dict__.setdefault("_graph_calls", []).append((inputs, outputs))

    def _one_call(self, what: str) -> tuple[Any, Any]:
        calls = self.__dict__.get("_graph_calls", [])
        if len(calls) != 1:
            raise GraphCallError(f"{self.name}: layer.{what} is defined for a layer called once on "
                                 f"graph nodes; this one was called {len(calls)} times")
        return calls[0]

    @property
    def input(self) -> Any:
        """The node(s) the one call on graph nodes read (a list for several; Keras' ``layer.input``)."""
        return self._one_call("input")[0]

    @property
    def output(self) -> Any:
        """The node of the one call on graph nodes, a list for several outputs (Keras' ``layer.output``)."""
        return self._one_call("output")[1]
