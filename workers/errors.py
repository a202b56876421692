"""Errors a worker or producer sees."""

from __future__ import annotations


class ApiError(Exception):
    """The API answered with an error: its HTTP status, `code` and `message`."""

    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message = status, code, message


class FatalTaskError(Exception):
    """Raise from a handler to fail the task without retry (SMILA's failedWithoutRetry)."""
