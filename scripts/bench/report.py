"""Benchmark figures and their table: one line per figure, jobnik's value beside a floor.

Shared by the benchmark scripts so that every figure prints (and serialises) the same way:

  name                          backend    jobnik      floor      ratio  orientation

`ratio` is value / floor. For throughput (`higher_is_better`) it is the share of the floor jobnik
reaches (higher is better, 1.0 = as fast as the bare SQL); for latency and memory it is how many
times the floor jobnik costs (lower is better). A figure without a floor (a count, a CPU time per
task) has no ratio; its orientation says only which way is better.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Figure:
    """One measured figure and the floor measured beside it in the same run, same database."""

    name: str
    backend: str
    value: float
    floor: float | None
    unit: str
    higher_is_better: bool = True
    floor_name: str = "bare SQL"
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.floor is None:
            return None
        return self.value / self.floor if self.floor else math.inf

    @property
    def orientation(self) -> str:
        if self.floor is None:
            return "lower=better" if not self.higher_is_better else ""
        return "share of floor, higher=better" if self.higher_is_better else "x floor, lower=better"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "ratio": self.ratio, "orientation": self.orientation}


@dataclass(frozen=True)
class Goal:
    """A target a figure must meet, and whether this run met it."""

    name: str
    backend: str
    met: bool
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _num(x: float | None) -> str:
    if x is None:
        return "-"
    if abs(x) >= 100:
        return f"{x:,.0f}"
    return f"{x:,.2f}" if abs(x) >= 1 else f"{x:.3f}"


def print_figures(figures: Sequence[Figure], say: Callable[[str], None] = print) -> None:
    """The figures as a table (one line each)."""
    say(
        f"{'figure':<44} {'backend':<8} {'jobnik':>12} {'floor':>12} {'unit':<9} "
        f"{'ratio':>7}  orientation; floor; note"
    )
    for f in figures:
        ratio = "-" if f.ratio is None else f"{f.ratio:.2f}"
        tail = "; ".join(x for x in (f.orientation, f.floor_name if f.floor else "", f.note) if x)
        say(
            f"{f.name:<44} {f.backend:<8} {_num(f.value):>12} {_num(f.floor):>12} {f.unit:<9} "
            f"{ratio:>7}  {tail}"
        )


def print_goals(goals: Sequence[Goal], say: Callable[[str], None] = print) -> None:
    """One line per goal: met or MISSED, and the numbers that decided it."""
    for g in goals:
        say(f"goal {g.name:<52} {g.backend:<8} {'met' if g.met else 'MISSED':<6}  {g.detail}")


def write_json(path: Path, figures: Sequence[Figure], goals: Sequence[Goal], **meta: Any) -> None:
    """The figures and goals as JSON (ratios and orientations included)."""
    body = {
        **meta,
        "figures": [f.as_dict() for f in figures],
        "goals": [g.as_dict() for g in goals],
    }
    path.write_text(json.dumps(body, indent=2, default=str) + "\n")
