from __future__ import annotations

import pytest

from jobnik.domain import patterns
from jobnik.domain.errors import InvalidFailurePattern
from jobnik.domain.stages import Stage

from ..builders import new_stage, replay


def stage_with(*failure_patterns: str) -> Stage:
    return new_stage(failure_patterns=failure_patterns)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        ("(?i)status:\\s*failed", "Status: FAILED"),
        ("[0-9]{3} (error|refused)", "got 503 refused"),
        ("^I cannot complete", "I cannot complete this"),
        ("\\bfatal\\b", "a fatal error"),
        ("caf\u00e9+", "caf\u00e9\u00e9"),
    ],
)
def test_the_patterns_users_write_match(pattern: str, text: str) -> None:
    stage = stage_with(pattern)

    reason = stage.failure_in({"output": ["ok", {"deep": text}]})

    assert reason is not None
    assert repr(pattern) in reason


def test_a_catastrophic_pattern_matches_in_linear_time() -> None:
    # Python's backtracking `re` needs about 2**60 steps for this; RE2 answers at once.
    stage = stage_with("^(a+)+$")

    assert stage.failure_in({"text": "a" * 60 + "!"}) is None
    assert stage.failure_in({"text": "a" * 60}) is not None


@pytest.mark.parametrize("pattern", ["(?=lookahead)", "(a)\\1", "("])
def test_a_pattern_re2_cannot_compile_is_refused_by_name(pattern: str) -> None:
    with pytest.raises(InvalidFailurePattern) as refused:
        stage_with("ok", pattern)

    assert refused.value.code == "INVALID_FAILURE_PATTERN"
    assert refused.value.message.startswith(f"request/body/failurePatterns/1: {pattern!r}")


def test_a_stored_pattern_re2_refuses_replays_and_matches_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as m:  # a stage stored before patterns were checked
        m.setattr(patterns, "check", lambda _: None)
        stage = stage_with("(?=x)", "boom")

    again = replay(stage.collect_events())

    assert again.failure_patterns == ["(?=x)", "boom"]
    assert again.failure_in({"text": "x"}) is None
    assert again.failure_in({"text": "boom"}) is not None
