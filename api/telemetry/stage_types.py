"""Which stage types have series of their own in the metrics, and the aggregate of the others.

Stage types are named by the API's clients, so their number has no bound of its own: each
scrape gives series of their own to the JOBNIK_METRICS_STAGE_TYPES types with the most tasks
(ties by name), and counts every other type under `stage_type="__other__"` (sums of their
counts; of their queues, the longest wait). A type named `__other__` is always counted there.
With the setting at 0 every type is.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Final, TypeVar

OTHER: Final = "__other__"
K = TypeVar("K", bound=Hashable)


@dataclass(frozen=True)
class Shown:
    """The stage types with series of their own; called with a type, its label."""

    types: frozenset[str]

    def __call__(self, stage_type: str) -> str:
        return stage_type if stage_type in self.types else OTHER


def shown(tasks: Mapping[str, int], limit: int) -> Shown:
    """The `limit` stage types with the most `tasks` (ties by name), `OTHER` never among them."""
    ranked = sorted((t for t in tasks if t != OTHER), key=lambda t: (-tasks[t], t))
    return Shown(frozenset(ranked[:limit]))


def fold(counts: Mapping[K, int], relabel: Callable[[K], K]) -> dict[K, int]:
    """`counts` under their keys relabelled (an aggregate's stage type), summed."""
    out: dict[K, int] = {}
    for key, n in counts.items():
        into = relabel(key)
        out[into] = out.get(into, 0) + n
    return out
