from __future__ import annotations

import pytest

from jobnik.workers import Backoff

SAMPLES = 400


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 20])
def test_every_delay_is_the_exponential_base_give_or_take_a_quarter(n: int) -> None:
    backoff = Backoff(initial=0.05, factor=2.0, maximum=5.0, jitter=0.25)
    base = min(5.0, 0.05 * 2.0 ** (n - 1))

    delays = [backoff.delay(n) for _ in range(SAMPLES)]

    assert all(0.75 * base <= d <= 1.25 * base for d in delays)


def test_without_jitter_the_delays_double_until_the_cap() -> None:
    backoff = Backoff(initial=0.1, factor=2.0, maximum=1.0, jitter=0.0)

    delays = [backoff.delay(n) for n in range(1, 8)]

    assert delays == pytest.approx([0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0])


def test_the_jitter_spreads_the_delays_over_most_of_the_band() -> None:
    backoff = Backoff(initial=1.0, factor=2.0, maximum=100.0, jitter=0.25)

    delays = [backoff.delay(3) for _ in range(SAMPLES)]

    assert min(delays) < 0.8 * 4.0
    assert max(delays) > 1.2 * 4.0
    assert len(set(delays)) > SAMPLES // 2


def test_the_first_delay_is_the_initial_one() -> None:
    backoff = Backoff(initial=0.05, jitter=0.0)

    first = backoff.delay(1)

    assert first == pytest.approx(0.05)


def test_a_long_idle_streak_stays_at_the_cap() -> None:
    backoff = Backoff()

    delays = [backoff.delay(n) for n in (1024, 1025, 5000)]

    assert all(3.75 <= d <= 6.25 for d in delays)
