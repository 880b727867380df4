"""Errors on the wire: `{"error": {"code", "message", "exit_code"}}`, both ways, one table."""

from __future__ import annotations

from msgspec import Struct

from fleet import errors


class ErrorBody(Struct, frozen=True, omit_defaults=True):
    """What went wrong: a stable code, the message a user reads, the CLI's exit code."""

    code: str
    message: str
    exit_code: int
    host: str | None = None  # HostError: the host, with `detail` its own message
    detail: str | None = None
    explanation: str | None = None  # NoPlacement: every candidate's reasons


class ErrorReply(Struct, frozen=True):
    """Every non-2xx answer's body."""

    error: ErrorBody


# code -> (class, HTTP status); most specific classes first (the first isinstance match wins).
ERROR_TABLE: tuple[tuple[str, type[errors.FleetError], int], ...] = (
    ("not_permitted", errors.PermissionDenied, 403),
    ("no_placement", errors.NoPlacement, 409),
    ("dispatch_failed", errors.DispatchError, 409),
    ("allocation_conflict", errors.AllocationConflict, 409),
    ("host_unreachable", errors.HostUnreachable, 502),
    ("auth_failed", errors.AuthFailed, 502),
    ("host_key_rejected", errors.HostKeyRejected, 502),
    ("probe_error", errors.ProbeError, 502),
    ("host_error", errors.HostError, 502),
    ("bad_input", errors.ConfigError, 400),
    ("storage", errors.StorageError, 503),
    ("server_unavailable", errors.ServerUnavailable, 503),
    ("error", errors.FleetError, 500),
)
# Codes of requests the server could not take at all (no FleetError behind them).
BAD_REQUEST = "bad_request"
NOT_FOUND = "not_found"
METHOD_NOT_ALLOWED = "method_not_allowed"
TOO_LARGE = "too_large"
INTERNAL = "internal"


def error_to_wire(exc: errors.FleetError) -> tuple[int, ErrorReply]:
    """(HTTP status, body) for a FleetError raised by a service."""
    for code, kind, status in ERROR_TABLE:
        if isinstance(exc, kind):
            body = ErrorBody(code=code, message=str(exc), exit_code=exc.exit_code)
            if isinstance(exc, errors.HostError):
                body = ErrorBody(code=code, message=str(exc), exit_code=exc.exit_code,
                                 host=exc.host, detail=exc.detail)
            elif isinstance(exc, errors.NoPlacement):
                body = ErrorBody(code=code, message=str(exc), exit_code=exc.exit_code,
                                 explanation=exc.explanation)
            return status, ErrorReply(body)
    raise AssertionError("FleetError is the table's last row")  # pragma: no cover


def request_error(status: int, code: str, message: str) -> ErrorReply:
    """The body for a request refused before any service ran (400, 404, 405, 413, 500)."""
    return ErrorReply(ErrorBody(code=code, message=message,
                                exit_code=errors.ConfigError.exit_code if status < 500
                                else errors.FleetError.exit_code))


def error_from_wire(body: ErrorBody) -> errors.FleetError:
    """The FleetError a server's error body stands for (same class, message and exit code).

    The server answers every FleetError with its code and HTTP status; the client raises the same
    FleetError subclass again, so a command exits with the same code in both modes.
    """
    found = _rebuild(body)
    if found.exit_code != body.exit_code:  # a subclass outside the table keeps its own code
        found.exit_code = body.exit_code
    return found


def _rebuild(body: ErrorBody) -> errors.FleetError:
    for code, kind, _status in ERROR_TABLE:
        if code != body.code:
            continue
        if issubclass(kind, errors.HostError):
            return kind(body.host or "?", body.detail or body.message)
        if kind is errors.NoPlacement:
            return errors.NoPlacement(body.message, explanation=body.explanation or "")
        return kind(body.message)
    if body.exit_code == errors.ConfigError.exit_code:
        return errors.ConfigError(body.message)
    return errors.FleetError(body.message)
