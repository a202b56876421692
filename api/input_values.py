"""The input gate's checks of a request's values: its path, query and JSON body, checked once,
before any route (api/input_gate.py applies them).

What it refuses is what one backend would store and the other would not, or what no response
could render back: NUL characters and lone surrogates (PostgreSQL's text and jsonb refuse them,
SQLite keeps them), NaN, Infinity and numbers that overflow a double (PostgreSQL refuses them,
SQLite's JSON turns them into null), integers beyond 64 bits (stored exactly by one backend,
rounded by the other and by most JSON clients), bodies nested deeper than a response can be
serialised, strings and bodies over their limits, and objects of only the keys `_type_` and
`_data_` (the event log's encoding of its own values, which it would read back as another value,
or fail to read). Each refusal is a 400 (413 for the body size) with its own code, and nothing
after the gate runs, so nothing is written.
"""

from __future__ import annotations

import json
import math
import re
import time
from dataclasses import dataclass
from typing import Any, Final

import orjson

from jobnik.api.settings import Settings
from jobnik.domain.errors import (
    InvalidCharacter,
    InvalidRequest,
    JobnikError,
    JsonTooDeep,
    NumberOutOfRange,
    ReservedObject,
    StringTooLong,
)

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
# Nineteen digits in a row (maybe an integer beyond 64 bits), found as nineteen zeros once every
# digit is one (a translation and a substring search: a tenth of a regular expression's time).
_DIGITS_AS_ZERO: Final = bytes.maketrans(b"123456789", b"000000000")
_LONG_DIGITS: Final = b"0" * 19
_ESCAPE: Final = b"\\u"  # (an escaped NUL, or a key spelled with escapes)
_RESERVED_KEY: Final = b'"_type_"'
# An object whose first key is `_type_` or `_data_`, in orjson's rendering (keys unescaped).
_RESERVED_START: Final = re.compile(rb'\{"_(?:type|data)_":')
_STRING: Final = re.compile(rb'"[^"]*"')  # (once escaped quotes are gone)
_SQUARE: Final = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKET: Final = bytes(range(256)).translate(None, b'[]{}"')  # (quotes kept, to find strings)
_NOT_LIST: Final = bytes(range(256)).translate(None, b'[]{}",')
_INNERMOST: Final = re.compile(rb"\[[^\[\]]*\]")
# check_value's pause: every WALK_STRIDE values (a few milliseconds), WALK_PAUSE seconds; a body
# parsed on the event loop (the gate's INLINE_BYTES at most) holds fewer values, so it never
# pauses there.
WALK_STRIDE: Final = 4096
WALK_PAUSE: Final = 0.0001


@dataclass(frozen=True)
class Limits:
    """The gate's limits (JOBNIK_MAX_BODY_BYTES, _MAX_JSON_DEPTH, _MAX_STRING_LENGTH) and the
    hosts it answers to (JOBNIK_ALLOWED_HOSTS, in lower case; none: any)."""

    body_bytes: int = 1024 * 1024
    depth: int = 64
    string_length: int = 1024 * 1024
    hosts: tuple[str, ...] = ()

    @classmethod
    def of(cls, settings: Settings) -> Limits:
        return cls(
            settings.max_body_bytes,
            settings.max_json_depth,
            settings.max_string_length,
            tuple(h.lower() for h in settings.allowed_hosts),
        )


def check_text(where: str, text: str, limits: Limits | None) -> None:
    """Refuse a string the stores or the responses cannot keep as it is (and, given limits, a
    longer one than they allow)."""
    if limits is not None and len(text) > limits.string_length:
        raise StringTooLong(f"{where} is longer than {limits.string_length} characters")
    if "\x00" in text:
        raise InvalidCharacter(f"{where} contains a NUL character (U+0000)")
    if not text.isascii() and _SURROGATE.search(text):
        raise InvalidCharacter(f"{where} contains a lone surrogate (not valid Unicode)")


def _acceptable(text: str, limits: Limits) -> bool:
    """Whether check_text would pass `text` (without building the message it needs when not)."""
    return (
        len(text) <= limits.string_length
        and "\x00" not in text
        and (text.isascii() or not _SURROGATE.search(text))
    )


def _int(text: str) -> int:
    value = int(text) if len(text) <= 20 else INT64_MAX + 1
    if not INT64_MIN <= value <= INT64_MAX:
        raise NumberOutOfRange(f"integer {text[:40]} is outside the 64-bit range")
    return value


def _float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise NumberOutOfRange(f"number {text[:40]} overflows a double")
    return value


def _constant(text: str) -> Any:
    raise NumberOutOfRange(f"{text} is not a JSON number; numbers must be finite")


def parse_json(body: bytes, limits: Limits) -> Any:
    """`body` as JSON, or the gate's error for it (InvalidRequest for what is not JSON)."""
    if _plain(body, limits):
        try:
            value = orjson.loads(body)
        except orjson.JSONDecodeError:
            pass  # (the json module's parse says what is wrong)
        else:
            if _deeper(body, limits.depth):
                raise JsonTooDeep(_too_deep(limits))
            return value
    return parse_json_strictly(body, limits)


def parse_json_strictly(body: bytes, limits: Limits) -> Any:
    """`parse_json` by the json module; the value walked (check_value) unless `_clean` shows
    that the walk would find nothing."""
    try:
        value = json.loads(body, parse_int=_int, parse_float=_float, parse_constant=_constant)
    except RecursionError:
        raise JsonTooDeep(_too_deep(limits)) from None
    except (ValueError, UnicodeError) as e:
        if isinstance(e, JobnikError):
            raise
        raise InvalidRequest("request/body is not valid JSON") from None
    if not _clean(value, limits):
        check_value(value, limits)
    return value


def _plain(body: bytes, limits: Limits) -> bool:
    """Whether any JSON value orjson parses from `body` passes the gate as it is, but for its
    depth (`_deeper`), unwalked.

    orjson parses UTF-8 JSON only, into the values the json module would, and refuses a lone
    surrogate, NaN, Infinity and a number that overflows a double. What it takes and the gate
    would not is ruled out here: a string longer than the limit (none is longer than the body),
    an escaped NUL, an integer beyond 64 bits (nineteen digits at least), an object of only
    `_type_` and `_data_` (no `\\u` escape, which may spell a key, and no `"_type_"` as it
    is)."""
    return (
        len(body) <= limits.string_length
        and _ESCAPE not in body
        and _RESERVED_KEY not in body
        and _LONG_DIGITS not in body.translate(_DIGITS_AS_ZERO)
    )


def _clean(value: Any, limits: Limits) -> bool:
    """Whether check_value would find nothing in `value` (a value the json module parsed with
    the gate's number hooks), shown on orjson's rendering of it, where every string is as long
    as its text at least, a NUL is `\\u0000`, a key is never escaped, and a lone surrogate or a
    nesting of more than 254 levels cannot be rendered. False may be wrong (then the walk
    decides), True is not."""
    try:
        rendered = orjson.dumps(value)
    except orjson.JSONEncodeError:
        return False
    return (
        len(rendered) <= limits.string_length
        and b"\\u0000" not in rendered
        and _RESERVED_START.search(rendered) is None
        and not _deeper(rendered, limits.depth)
    )


def _deeper(body: bytes, depth: int) -> bool:
    """Whether valid UTF-8 JSON `body` nests deeper than `depth` levels: its brackets, rid of
    their innermost pairs once per level."""
    if body.count(b"[") + body.count(b"{") <= depth:
        return False
    shape = _structure(body, _NOT_BRACKET)
    for _ in range(depth):
        shape = shape.replace(b"[]", b"")
        if not shape:
            return False
    return True


def array_length(body: bytes, depth: int) -> int | None:
    """The number of items of the array `body` holds, counted on its text (commas between its
    items, once the arrays and objects within are taken out, one level at a time); None when
    it holds no array, or when its items nest more than `depth` levels deep. Exact for valid
    UTF-8 JSON (a body that is not JSON is refused by the parse anyway)."""
    text = body.strip()
    if not (text.startswith(b"[") and text.endswith(b"]")):
        return None
    inner = _structure(text, _NOT_LIST)[1:-1].replace(b"[]", b"")
    for _ in range(depth):
        if b"[" not in inner:
            commas = inner.count(b",")
            return commas + 1 if commas or text[1:-1].strip() else 0
        inner = _INNERMOST.sub(b"", inner)
    return None


def _structure(body: bytes, others: bytes) -> bytes:
    """Valid UTF-8 JSON `body` without its strings, nor the characters `others` lists, its
    braces as brackets: its escaped backslashes and quotes taken out, then its other
    characters, then its strings (most hold neither bracket nor comma: `""`)."""
    if b"\\" in body:
        body = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    shape = body.translate(_SQUARE, others).replace(b'""', b"")
    return _STRING.sub(b"", shape) if b'"' in shape else shape


def _too_deep(limits: Limits) -> str:
    return f"request/body nests deeper than {limits.depth} levels"


def check_value(value: Any, limits: Limits) -> None:
    """Walk a parsed JSON value: nesting depth, and every key and string (check_text).

    A long walk runs in a worker thread (bodies over the gate's INLINE_BYTES), and pauses every
    WALK_STRIDE values: the thread lets the interpreter go at once, so the event loop, which
    waits for it, does not wait for the interpreter's switch interval each time."""
    # (value, depth, path) with the path as (parent, key) links: built cheaply, rendered only
    # for an error message.
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    walked = 0
    while stack:
        walked += 1
        if walked % WALK_STRIDE == 0:
            time.sleep(WALK_PAUSE)
        item, depth, path = stack.pop()
        if isinstance(item, str):
            if not _acceptable(item, limits):
                check_text(_where(path), item, limits)
        elif isinstance(item, dict):
            if depth >= limits.depth:
                raise JsonTooDeep(_too_deep(limits))
            if len(item) == 2 and "_type_" in item and "_data_" in item:
                raise ReservedObject(
                    f"{_where(path)} is an object of only the keys _type_ and _data_, a shape"
                    " the event log reserves for its own values"
                )
            for k, v in item.items():
                if not _acceptable(k, limits):
                    check_text(_where((path, k)) + " (a key)", k, limits)
                stack.append((v, depth + 1, (path, k)))
        elif isinstance(item, list):
            if depth >= limits.depth:
                raise JsonTooDeep(_too_deep(limits))
            stack.extend((v, depth + 1, (path, i)) for i, v in enumerate(item))


def _where(path: Any) -> str:
    keys: list[str] = []
    while path is not None:
        path, key = path
        keys.append(quoted(str(key)))
    return "/".join(["request/body", *reversed(keys)])


def quoted(text: str) -> str:
    """`text` for a message: at most 50 characters, the unprintable ones as \\uXXXX."""
    return "".join(
        c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else f"\\u{ord(c):04x}"
        for c in text[:50]
    )
