"""Exceptions raised by the mlstream client.

Every refusal of the server becomes an :class:`APIError` (or one of its
subclasses, chosen by status) that carries the server's JSON error body:
``error`` (the message), ``line`` (the NDJSON line or array position, 1-based)
and ``field`` (e.g. ``label``, ``features.amount``, ``params.hash_bits``).
"""

from __future__ import annotations

from typing import Any, Optional


class MlstreamError(Exception):
    """Base class of every error this package raises on purpose."""


class APIError(MlstreamError):
    """The server answered with an error status.

    Attributes: ``status`` (HTTP status), ``error`` (the server's message),
    ``line`` and ``field`` (``None`` when the server named none), ``body``
    (the whole decoded JSON body, or ``{}``), ``method`` and ``path`` of the
    request; from a batched send (``learn_many``), ``accepted`` (events
    accepted by the requests before) and ``index`` (the refused event's
    0-based position in the input).
    """

    def __init__(self, status: int, body: Optional[dict] = None, *, method: str = "", path: str = "",
                 text: str = ""):
        self.status = status
        self.body: dict = body if isinstance(body, dict) else {}
        self.error: str = str(self.body.get("error") or text or f"HTTP {status}")
        self.line: Optional[int] = self.body.get("line")
        self.field: Optional[str] = self.body.get("field")
        self.method = method
        self.path = path
        # Set by batched sends: events accepted before this request, and the
        # refused event's position in the whole input.
        self.accepted: Optional[int] = None
        self.index: Optional[int] = None
        super().__init__(self._describe())

    def _describe(self) -> str:
        where = []
        if self.line is not None:
            where.append(f"line {self.line}")
        if self.field:
            where.append(f"field {self.field!r}")
        loc = f" ({', '.join(where)})" if where else ""
        req = f" on {self.method} {self.path}" if self.method else ""
        return f"{self.status}{req}: {self.error}{loc}"

    def get(self, key: str, default: Any = None) -> Any:
        """A field of the server's error body, e.g. ``err.get("scope")``."""
        return self.body.get(key, default)


class BadRequest(APIError):
    """400: bad JSON, a bad field or a bad job spec; ``line`` and ``field`` say where."""


class Unauthorized(APIError):
    """401: no token, or an unknown one."""


class Forbidden(APIError):
    """403: the token lacks the scope; ``get("scope")`` names the one needed."""


class NotFound(APIError):
    """404: no such job, or no job reads the stream."""


class Conflict(APIError):
    """409: the job name is taken by a different spec."""


class PayloadTooLarge(APIError):
    """413: the body, one event, or the number of events is over a limit."""


class UnsupportedMediaType(APIError):
    """415: not a JSON or NDJSON content type."""


class TooManyRequests(APIError):
    """429: a partition queue stayed full; nothing of the request was queued.

    ``retry_after`` is the wait the server asked for, in seconds: its
    ``retry_after_ms`` when present (finer), else the ``Retry-After`` header.
    """

    def __init__(self, status: int, body: Optional[dict] = None, *, retry_after: float = 1.0, **kw):
        super().__init__(status, body, **kw)
        self.retry_after = retry_after


class ServiceUnavailable(APIError):
    """503: shutting down, not ready, or too many WebSocket clients."""


class InsufficientStorage(APIError):
    """507: a new job would exceed the memory budget or the job limit."""


_BY_STATUS = {
    400: BadRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    413: PayloadTooLarge,
    415: UnsupportedMediaType,
    429: TooManyRequests,
    503: ServiceUnavailable,
    507: InsufficientStorage,
}


def api_error(status: int, body: Optional[dict], *, retry_after_header: Optional[str] = None, **kw) -> APIError:
    """The exception for an error answer of the server."""
    cls = _BY_STATUS.get(status, APIError)
    if cls is TooManyRequests:
        return TooManyRequests(status, body, retry_after=_retry_after(body, retry_after_header), **kw)
    return cls(status, body, **kw)


def _retry_after(body: Optional[dict], header: Optional[str]) -> float:
    ms = (body or {}).get("retry_after_ms")
    if isinstance(ms, (int, float)) and ms > 0:
        return ms / 1000.0
    try:
        return max(float(header), 0.0) if header else 1.0
    except ValueError:
        return 1.0


class NotSupportedByServer(MlstreamError, NotImplementedError):
    """The call is part of the client's planned API, but the server has no
    endpoint for it yet (delayed labels)."""
