"""Readable payloads: a stored value that no response could render, made renderable.

The input gate refuses such values now; rows stored before it may still hold them. When an item
fails to render, it is built again inside `readable_payloads()`, where every free-form payload
(`data`, `userMetadata`, `result`, an event's payload) passes through `readable`: subtrees nested
deeper than CUT_DEPTH become a marker string, lone surrogates become U+FFFD, non-finite numbers
null and integers beyond 64 bits strings. The item keeps its shape and its other fields.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Final

CUT_DEPTH: Final = 64
CUT: Final = f"[unreadable: nested deeper than {CUT_DEPTH} levels]"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_ACTIVE: ContextVar[bool] = ContextVar("jobnik_readable_payloads", default=False)


@contextmanager
def readable_payloads() -> Iterator[None]:
    """Within this block, payloads are made readable as response models are built."""
    token = _ACTIVE.set(True)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def if_asked(value: Any) -> Any:
    """`readable(value)` inside `readable_payloads()`, else `value` untouched."""
    return readable(value) if _ACTIVE.get() else value


def readable(value: Any, depth: int = 0) -> Any:
    """A copy of a JSON value every response can render (see the module's docstring)."""
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, dict | list) and depth >= CUT_DEPTH:
        return CUT
    if isinstance(value, dict):
        return {readable(str(k)): readable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [readable(v, depth + 1) for v in value]
    return value
