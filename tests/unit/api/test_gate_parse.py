"""The input gate parses a plain body with orjson, unwalked (api/input_values.py): for any body,
what it answers (the value, or the error and its message) is what the json module's walked parse
answers."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jobnik.api.input_gate import InputGate
from jobnik.api.input_values import Limits, array_length, parse_json, parse_json_strictly
from jobnik.domain.errors import JobnikError, JsonTooDeep

LIMITS = [Limits(), Limits(body_bytes=1 << 20, depth=3, string_length=8)]

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=2**63 - 3, max_value=2**64 + 3)
    | st.integers(min_value=-(2**64) - 3, max_value=-(2**63) + 3)
    | st.floats()
    | st.text()
    | st.sampled_from(["\x00", "a\ud800", "\udc00b", "\u2028", "é😀"])
)


VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


def _json(value: Any) -> bytes:
    # (NaN and the infinities as the json module writes them; lone surrogates as escapes)
    return json.dumps(value).encode()


BODIES = (
    VALUES.map(_json)
    | st.binary(max_size=40)
    | st.integers(0, 80).map(lambda n: b'{"a":' * n + b"1" + b"}" * n)
    | st.sampled_from([b"[1e400]", b"[-1e-400]", b"NaN", b'"\\u0000"', b'["\\ud83d\\ude00"]'])
    | st.sampled_from([b'{"_type_":"x","_data_":1}', b'[{"\\u005ftype_":1,"_data_":2}]'])
    | st.sampled_from([b'{"_data_":1,"_type_":"a","b":2}', b'{"_type_":"uuid_hex"}'])
    | st.tuples(VALUES.map(_json), st.binary(max_size=3), st.integers(0, 30)).map(
        lambda t: t[0][: t[2]] + t[1] + t[0][t[2] :]
    )
)


def _answer(parse: Any, body: bytes, limits: Limits) -> Any:
    try:
        value = parse(body, limits)
    except JobnikError as e:
        return type(e), str(e)
    return "value", repr(value)


@settings(max_examples=600, deadline=None)
@given(BODIES, st.sampled_from(LIMITS))
def test_the_gate_answers_any_body_as_its_walked_parse_does(body: bytes, limits: Limits) -> None:
    assert _answer(parse_json, body, limits) == _answer(parse_json_strictly, body, limits)


def test_a_plain_body_is_parsed_whole() -> None:
    body = b'[{"id": "x", "attempt": 1, "result": {"f": 0.5, "n": null, "s": "\\u00e9"}}]'
    assert parse_json(body, Limits()) == [
        {"id": "x", "attempt": 1, "result": {"f": 0.5, "n": None, "s": "é"}}
    ]


SHALLOW = Limits(depth=3)


@pytest.mark.parametrize(
    ("body", "deep"),
    [
        (b'[[["]]]]]", "[[[[{{"]]]', False),  # brackets inside strings are text
        (b'[[[1]], [[2]], {"a": {"b": "[[[["}}]', False),
        (b'[{"k": "x\\\\"}, [[["\\"[[["]]]]', True),  # escaped quotes and backslashes
        (b'["a[", "]b", ["", [["]"]]]]', True),
        (b"[" + b",".join([b"{}"] * 1000) + b"]", False),  # many brackets, shallow
        (b'{"a": [{"b": [{}]}]}', True),
    ],
)
def test_the_depth_of_a_body_is_its_nesting_not_its_bracket_count(body: bytes, deep: bool) -> None:
    answer = _answer(parse_json, body, SHALLOW)

    assert answer == _answer(parse_json_strictly, body, SHALLOW)
    assert (answer[0] is JsonTooDeep) is deep, answer


@settings(max_examples=300, deadline=None)
@given(st.lists(VALUES, max_size=12), st.booleans())
def test_an_array_is_counted_on_its_text_as_its_parse_counts_it(
    items: list[Any], indent: bool
) -> None:
    body = json.dumps(items, indent=2 if indent else None).encode()

    assert array_length(body, 200) == len(items)


@pytest.mark.parametrize("body", [b'{"a": [1, 2]}', b'"[1, 2]"', b"17", b"[" * 10 + b"]" * 10])
def test_what_holds_no_array_within_the_depth_is_not_counted(body: bytes) -> None:
    assert array_length(body, 3) is None


def test_a_body_its_client_left_before_its_end_reaches_no_application() -> None:
    reached: list[Any] = []
    sent: list[Any] = []

    async def application(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)

    messages = iter(
        [
            {"type": "http.request", "body": b'{"name": "ab", "data": {}}  ', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> Any:
        return next(messages)

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "POST", "path": "/v1/jobs", "headers": []}
    asyncio.run(InputGate(application, Limits())(scope, receive, send))

    assert (reached, sent) == ([], [])
