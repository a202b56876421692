"""Scrapes that arrive together share one rendering of the exposition."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterable

from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from jobnik.api.telemetry.metrics import Scrapes


class Slow(Collector):
    """A collector that counts its collections and holds each until released."""

    def __init__(self) -> None:
        self.collected = 0
        self.release = threading.Event()

    def collect(self) -> Iterable[Metric]:
        self.collected += 1
        self.release.wait(10)
        return [GaugeMetricFamily("jobnik_slow", "a slow read", value=self.collected)]


async def scrape_together(scrapes: Scrapes, registry: CollectorRegistry, slow: Slow) -> list[bytes]:
    waiting = [asyncio.create_task(scrapes.render(registry, None)) for _ in range(20)]
    await asyncio.sleep(0.1)  # every scrape has arrived while the first one renders
    slow.release.set()
    return [body for body, _ in await asyncio.gather(*waiting)]


def test_scrapes_arriving_while_one_renders_share_its_body() -> None:
    registry, slow, scrapes = CollectorRegistry(), Slow(), Scrapes()
    registry.register(slow)

    bodies = asyncio.run(scrape_together(scrapes, registry, slow))
    later, _ = asyncio.run(scrapes.render(registry, None))

    assert slow.collected == 2  # once for the twenty together, once for the one after
    assert len(set(bodies)) == 1
    assert b"jobnik_slow 1.0" in bodies[0]
    assert b"jobnik_slow 2.0" in later


def test_a_scrape_in_another_format_renders_its_own() -> None:
    registry, slow, scrapes = CollectorRegistry(), Slow(), Scrapes()
    registry.register(slow)
    slow.release.set()

    async def both() -> list[tuple[bytes, str]]:
        openmetrics = "application/openmetrics-text; version=1.0.0"
        return list(
            await asyncio.gather(
                scrapes.render(registry, None), scrapes.render(registry, openmetrics)
            )
        )

    (_, text), (body, openmetrics) = asyncio.run(both())

    assert text.startswith("text/plain")
    assert openmetrics.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")
    assert slow.collected == 2
