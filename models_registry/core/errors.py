"""The one error hierarchy: every error a client may see, with its slug and HTTP status."""

from __future__ import annotations


class HostingError(Exception):
    """Base of every error a client may see; subclasses set the slug and status."""

    error_type = "internal"
    status = 500

    def __init__(self, message: str, *, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.headers = headers or {}


class InvalidInput(HostingError):
    """Malformed JSON, wrong types, parameters the task does not take."""

    error_type, status = "invalid_input", 400


class GrammarStalled(InvalidInput):
    """Structured output the grammar engine cannot go on with mid-answer: the generation ends with this 400."""


class Unauthorized(HostingError):
    """No token, or a token that is unknown, revoked or expired."""

    error_type, status = "unauthorized", 401


class Forbidden(HostingError):
    """A valid token not allowed to use this model."""

    error_type, status = "forbidden", 403


class NotFound(HostingError):
    """Unknown model or task."""

    error_type, status = "not_found", 404


class MethodNotAllowed(HostingError):
    """The route exists but not for this HTTP method."""

    error_type, status = "method_not_allowed", 405


class Conflict(HostingError):
    """The resource is in use (e.g. a file a running batch reads)."""

    error_type, status = "conflict", 409


class TooLarge(HostingError):
    """Body over HOSTING_MAX_BODY_BYTES, or more inputs than the task allows."""

    error_type, status = "too_large", 413


class RateLimited(HostingError):
    """The token's rate limit or quota is spent: with Retry-After and X-RateLimit-* headers."""

    error_type, status = "rate_limited", 429


class StorageQuotaFull(RateLimited):
    """The files a token keeps leave no room for an upload or a batch's next output (HOSTING_FILE_STORAGE_BYTES)."""


class Overloaded(HostingError):
    """The task's queue is full: answered at once, with Retry-After."""

    error_type, status = "overloaded", 503


class Unavailable(HostingError):
    """Model disabled, loading, failed to load, or no live worker serves it."""

    error_type, status = "unavailable", 503


class ModelDisabled(Unavailable):
    """An operator disabled the model (the admin's enabled box): 503, whatever else would answer."""

    def __init__(self, model: str) -> None:
        super().__init__(f"model {model!r} is disabled")


class Timeout(HostingError):
    """No result within the task's timeout_s."""

    error_type, status = "timeout", 504


class Internal(HostingError):
    """A pipeline error: the client reads only that it is internal and its request id, the server log the rest."""

    error_type, status = "internal", 500
    exposed = False  # its message may quote an exception: never sent to a client (public_message)


class Quarantined(Internal):
    """A request in flight at two worker deaths: answered 500 with why, never computed again."""

    exposed = True  # our own sentence, no exception text


def public_message(error: HostingError, request_id: str | None) -> str:
    """What a client may read of error: its message, or for an internal one only that and the request id."""
    if getattr(error, "exposed", True):
        return error.message
    return f"internal error (request id {request_id}); the details are in the server log"


def internal_error(request_id: str | None) -> Internal:
    """The 500 a client gets for an unexpected failure: that it is internal, and its request id."""
    return Internal(public_message(Internal(""), request_id))


ERROR_CLASSES: dict[str, type[HostingError]] = {
    cls.error_type: cls
    for cls in (InvalidInput, Unauthorized, Forbidden, NotFound, MethodNotAllowed, Conflict, TooLarge, RateLimited,
                Overloaded, Unavailable, Timeout, Internal)
}


def from_wire(error_type: str, message: str) -> HostingError:
    """Rebuild an error the worker sent back as {"error_type", "message"}."""
    return ERROR_CLASSES.get(error_type, Internal)(message)
