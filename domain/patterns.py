"""Failure patterns: regular expressions matched in linear time with RE2.

A stage's patterns are matched against the strings of every COMPLETED result, inside the write
that records it; Python's backtracking `re` can take exponential time on a pattern such as
`^(a+)+$`, stalling every other writer, while RE2 matches in time linear in the text. RE2 has
no backreferences or lookarounds: a stage is refused a pattern RE2 cannot compile. A pattern
stored before this check and refused by RE2 matches nothing (and is logged), so replaying and
reporting never fail on it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, Final

import re2  # type: ignore[import-untyped]

from jobnik.domain.errors import InvalidFailurePattern

log = logging.getLogger(__name__)

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False  # the library would print each refused pattern to stderr


@lru_cache(maxsize=1024)
def _compile(pattern: str) -> Any:
    return re2.compile(pattern, options=_OPTIONS)


def check(patterns: Sequence[str]) -> None:
    """Refuse a pattern RE2 cannot compile, naming it and its index."""
    for i, pattern in enumerate(patterns):
        try:
            _compile(pattern)
        except re2.error as e:
            reason = e.args[0].decode() if e.args and isinstance(e.args[0], bytes) else str(e)
            raise InvalidFailurePattern(
                f"request/body/failurePatterns/{i}: {pattern!r} is not an RE2 pattern: {reason}"
            ) from None


def first_match(patterns: Sequence[str], texts: Iterable[str]) -> tuple[str, str] | None:
    """(pattern, matched text) of the first text a pattern matches; None if none does."""
    compiled = []
    for pattern in patterns:
        try:
            compiled.append((pattern, _compile(pattern)))
        except re2.error:
            log.warning(
                "failure pattern %r is not an RE2 pattern: it matches nothing",
                pattern,
                extra={"action": "failure_pattern_skipped"},
            )
    for text in texts:
        for pattern, regex in compiled:
            found = regex.search(text)
            if found:
                return pattern, str(found.group(0))
    return None
