"""Durations on the command line: 90, 90s, 15m, 2h, 1d."""

from __future__ import annotations

import math
from datetime import timedelta

import typer

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str) -> timedelta:
    """'90', '90s', '15m', '2h' or '1d' as a timedelta."""
    number, unit = (text[:-1], text[-1]) if text and text[-1] in _UNITS else (text, "s")
    try:
        value = float(number)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not a duration like 90s, 15m, 2h or 1d") from None
    if not math.isfinite(value):
        raise typer.BadParameter(f"{text!r} is not a duration like 90s, 15m, 2h or 1d")
    if value < 0:
        raise typer.BadParameter("a duration cannot be negative")
    try:
        return timedelta(seconds=value * _UNITS[unit])
    except OverflowError:
        raise typer.BadParameter(f"{text!r} is longer than any duration jobnik takes") from None
