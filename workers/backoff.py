"""Polling delays: exponential growth with ±25 % jitter, as Jobnik's SDK does."""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Backoff:
    """`delay(n)` for the n-th consecutive empty poll or error (n ≥ 1)."""

    initial: float = 0.05
    factor: float = 2.0
    maximum: float = 5.0
    jitter: float = 0.25

    def delay(self, n: int) -> float:
        exponent = min(max(0, n - 1), 64)  # capped: an idle queue polls for days
        base = min(self.maximum, self.initial * self.factor**exponent)
        return base * random.uniform(1 - self.jitter, 1 + self.jitter)
