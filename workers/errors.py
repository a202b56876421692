"""Errors a worker or producer sees."""

from __future__ import annotations


class JobnikClientError(Exception):
    """The root of the SDK's errors."""


class InvalidUrl(JobnikClientError, ValueError):
    """A base URL that is not an http(s) URL with a host."""


class UnsendableBody(JobnikClientError, ValueError):
    """A request body the server would refuse, found before it was sent: NaN or Infinity, an
    integer beyond 64 bits, a NUL character or a lone surrogate in a string."""


class ApiError(JobnikClientError):
    """The API answered with an error: its HTTP status, `code` and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class AccessRefused(JobnikClientError):
    """The API refused the worker's token (401) or its role the operation (403), in the worker's
    own calls or in those its handler made: a configuration to fix, not a task's failure.
    `error` is the API's answer."""

    def __init__(self, error: ApiError) -> None:
        super().__init__(
            f"the API refused this worker ({error}): check its token (JOBNIK_TOKEN), its role "
            "and its stage types"
        )
        self.error = error


ACCESS_STATUSES = (401, 403)


def access_refusal(exc: BaseException | None) -> ApiError | None:
    """The 401 or 403 answer `exc` is, or was raised from (its cause or context), if any."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, ApiError) and exc.status in ACCESS_STATUSES:
            return exc
        seen.add(id(exc))
        exc = exc.__cause__ or exc.__context__
    return None


class TransportError(JobnikClientError):
    """The request got no HTTP answer. `sent` is False when it surely never reached the server
    (the connection failed), True when the server may have acted on it (the answer was lost)."""

    def __init__(self, message: str, *, sent: bool) -> None:
        super().__init__(message)
        self.sent = sent


class FatalTaskError(Exception):
    """Raise from a handler to fail the task without retry (FAILED at once)."""
