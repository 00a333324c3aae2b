"""The errors a request can cause: each carries its HTTP status and a machine-readable code, and
its message says what was wrong, what was expected and what was given."""

from __future__ import annotations

from typing import Any

from rnnkit._errors import InvalidInputError


class RequestError(InvalidInputError):
    """A request the server refuses. ``status`` is the HTTP status (4xx), ``code`` a short
    stable name (``bad_shape``, ``unknown_stream``, ...); ``expected`` / ``got`` describe the
    mismatch when there is one; ``close``: the answer closes the connection (a body left unread).
    The JSON body of the answer is :meth:`body`."""

    def __init__(self, status: int, code: str, message: str, *, expected: Any = None,
                 got: Any = None, close: bool = False, **extra: Any) -> None:
        super().__init__(message)
        self.close = close
        self.status = status
        self.code = code
        self.expected = expected
        self.got = got
        self.extra = extra

    def body(self) -> dict[str, Any]:
        """``{"error": {"code", "message", "expected"?, "got"?, ...}}``."""
        err: dict[str, Any] = {"code": self.code, "message": str(self)}
        if self.expected is not None:
            err["expected"] = self.expected
        if self.got is not None:
            err["got"] = self.got
        err.update(self.extra)
        return {"error": err}


def bad_request(code: str, message: str, **kw: Any) -> RequestError:
    """A 400 :class:`RequestError`."""
    return RequestError(400, code, message, **kw)


def unprocessable(code: str, message: str, **kw: Any) -> RequestError:
    """A 422 :class:`RequestError` (well-formed, but values the model cannot take)."""
    return RequestError(422, code, message, **kw)


__all__ = ["RequestError", "bad_request", "unprocessable"]
