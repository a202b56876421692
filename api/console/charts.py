"""Small time-series charts drawn on the server as inline SVG: no script and nothing fetched, so
they work air-gapped and under the pages' content policy (colours come from console.css classes,
never from style attributes). Each chart names itself and says its range in words for a screen
reader (`<title>`, `<desc>`), and each bar carries its minute and value as a tooltip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from markupsafe import Markup, escape

WIDTH, HEIGHT = 320, 100
LEFT, RIGHT, TOP, BOTTOM = 34, 6, 8, 82  # the plot's box inside the view box
MAX_BARS: Final = 120  # wider windows put several minutes in a bar


@dataclass(frozen=True)
class Series:
    """One line, or one layer of stacked bars: its name, its CSS class, a value per minute."""

    name: str
    css: str
    values: Sequence[int]


def hhmm(t: datetime) -> str:
    return t.strftime("%H:%M")


def _frame(chart_id: str, title: str, desc: str, top: int, start: datetime, end: datetime) -> str:
    """The opening tag, the accessible names, the axis labels and the baseline."""
    return (
        f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" '
        f'aria-labelledby="{chart_id}-t" aria-describedby="{chart_id}-d" id="{chart_id}">'
        f'<title id="{chart_id}-t">{escape(title)}</title>'
        f'<desc id="{chart_id}-d">{escape(desc)}</desc>'
        f'<text class="axis" x="{LEFT - 4}" y="{TOP + 4}" text-anchor="end">{top}</text>'
        f'<text class="axis" x="{LEFT - 4}" y="{BOTTOM}" text-anchor="end">0</text>'
        f'<line class="grid" x1="{LEFT}" y1="{TOP}" x2="{WIDTH - RIGHT}" y2="{TOP}"/>'
        f'<line class="base" x1="{LEFT}" y1="{BOTTOM}" x2="{WIDTH - RIGHT}" y2="{BOTTOM}"/>'
        f'<text class="axis" x="{LEFT}" y="{HEIGHT - 4}">{hhmm(start)}</text>'
        f'<text class="axis" x="{WIDTH - RIGHT}" y="{HEIGHT - 4}" text-anchor="end">'
        f"{hhmm(end)} UTC</text>"
    )


def _scale(highest: int) -> int:
    """The top of the axis: the highest value, at least 1."""
    return max(1, highest)


def line(chart_id: str, title: str, start: datetime, series: Series) -> Markup:
    """`series` as a line, a point at the end of each minute from `start`."""
    values = list(series.values)
    n = len(values)
    end = start + timedelta(minutes=n)
    top = _scale(max(values, default=0))
    step = (WIDTH - RIGHT - LEFT) / max(1, n)
    points = " ".join(
        f"{LEFT + step * (i + 1):.1f},{BOTTOM - (BOTTOM - TOP) * v / top:.1f}"
        for i, v in enumerate(values)
    )
    first = values[0] if values else 0
    last = values[-1] if values else 0
    desc = (
        f"{series.name}: {first} at {hhmm(start)}, {last} at {hhmm(end)} UTC, "
        f"at most {max(values, default=0)}"
    )
    start_y = BOTTOM - (BOTTOM - TOP) * first / top
    return Markup(
        _frame(chart_id, title, desc, top, start, end)
        + f'<polyline class="line {series.css}" fill="none" '
        f'points="{LEFT:.1f},{start_y:.1f} {points}"/></svg>'
    )


def bars(chart_id: str, title: str, start: datetime, layers: Sequence[Series]) -> Markup:
    """`layers` stacked as bars, one a minute from `start` (several when the window is wider
    than `MAX_BARS` minutes: the bar's values are their sums)."""
    n = max((len(s.values) for s in layers), default=0)
    per = max(1, -(-n // MAX_BARS))  # minutes a bar
    count = -(-n // per) if n else 0
    sums = [
        [sum(s.values[b * per : (b + 1) * per]) for b in range(count)] for s in layers
    ]  # by layer, by bar
    totals = [sum(layer[b] for layer in sums) for b in range(count)]
    top = _scale(max(totals, default=0))
    end = start + timedelta(minutes=n)
    width = (WIDTH - RIGHT - LEFT) / max(1, count)
    shapes = []
    for b in range(count):
        x = LEFT + width * b
        y = float(BOTTOM)
        at = start + timedelta(minutes=b * per)
        for s, layer in zip(layers, sums, strict=True):
            v = layer[b]
            if not v:
                continue
            h = (BOTTOM - TOP) * v / top
            y -= h
            shapes.append(
                f'<rect class="bar {s.css}" x="{x:.1f}" y="{y:.1f}" '
                f'width="{max(width - 0.6, 0.6):.1f}" height="{h:.1f}">'
                f"<title>{hhmm(at)} UTC: {v} {escape(s.name)}</title></rect>"
            )
    words = ", ".join(f"{sum(layer)} {s.name}" for s, layer in zip(layers, sums, strict=True))
    per_text = "a minute" if per == 1 else f"per {per} minutes"
    desc = (
        f"{words} from {hhmm(start)} to {hhmm(end)} UTC; at most {max(totals, default=0)} "
        f"{per_text}"
    )
    return Markup(_frame(chart_id, title, desc, top, start, end) + "".join(shapes) + "</svg>")
