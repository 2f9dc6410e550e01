"""``MetricsEndpoint``: the run's ``/metrics`` for Prometheus (``[metrics] port``).

``prometheus_client``'s own HTTP server (a daemon thread) with a registry holding one
collector, ``RunCollector``: at each scrape it asks the supervisor's event loop for the
figures (``scrape_figures.gather``, on the loop, where the store lives) and turns them
into families (``metrics_families``). Nothing is done per step, and ``prometheus_client``
is imported only when a port is set (it is an optional extra; the supervisor stays lean).
A port that cannot be served is an instant alert naming ``metrics.port``; the run goes on.
Torch-free.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from engine.alerts.rules import Alert
from engine.config.run_config import MetricsConfig
from engine.events import METRICS_PORT_RULE
from engine.supervisor.metrics.scrape_figures import FiguresSource, ScrapeFigures, gather

log = logging.getLogger(__name__)

SCRAPE_WAIT_S = 10.0  # s a scrape waits for the loop's figures before it fails (HTTP 500)


class RunCollector:
    """A custom collector (``prometheus_client.registry.Collector``): the figures at scrape time."""

    def __init__(self, take: Callable[[], ScrapeFigures]) -> None:
        self._take = take

    def collect(self) -> Iterable[Any]:
        from engine.supervisor.metrics.metrics_families import families  # needs prometheus_client

        return families(self._take())

    def describe(self) -> Iterable[Any]:
        return []  # no fixed names: the registry never collects to learn them


class MetricsEndpoint:
    """The HTTP server and its thread, while serving; ``close`` stops it."""

    def __init__(self, server: Any, thread: Any, address: str, port: int) -> None:
        self._server, self._thread = server, thread
        self.address, self.port = address, port

    @classmethod
    def open(
        cls, config: MetricsConfig, source: FiguresSource, alert: Callable[[list[Alert]], None]
    ) -> MetricsEndpoint | None:
        """Serve ``/metrics`` at ``config`` (None: off, or the port refused: alerted)."""
        if config.port is None:
            return None
        try:
            from prometheus_client import CollectorRegistry, start_http_server
        except ImportError:
            alert(
                [refused_alert(config, "prometheus-client is not installed: pip install 'memtui[metrics]'")]
            )
            return None
        loop = asyncio.get_running_loop()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(RunCollector(lambda: figures_from(loop, source)))
        try:
            server, thread = start_http_server(config.port, config.address, registry=registry)
        except OSError as err:
            alert([refused_alert(config, f"{type(err).__name__}: {err}")])
            return None
        port = int(server.server_address[1])
        log.info("serving metrics at http://%s:%d/metrics", config.address, port)
        return cls(server, thread, config.address, port)

    def close(self) -> None:
        """Stop serving (blocks up to the server's poll interval, 0.5 s: call off the loop)."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


def figures_from(loop: asyncio.AbstractEventLoop, source: FiguresSource) -> ScrapeFigures:
    """The figures, gathered on ``loop`` (the caller is the HTTP server's thread)."""

    async def take() -> ScrapeFigures:
        return gather(source, time.time())

    return asyncio.run_coroutine_threadsafe(take(), loop).result(SCRAPE_WAIT_S)


def refused_alert(config: MetricsConfig, why: str) -> Alert:
    """The warning (an instant) for a ``metrics.port`` that cannot be served."""
    where = f"{config.address}:{config.port}"
    return Alert(
        METRICS_PORT_RULE,
        "warning",
        f"metrics.port {config.port} cannot be served on {where} ({why}): no /metrics for this run; "
        "training goes on (set another metrics.port to have them)",
        {"port": config.port, "address": config.address, "error": why},
    )


async def serve_metrics(
    config: MetricsConfig, source: FiguresSource, alert: Callable[[list[Alert]], None]
) -> None:
    """A supervisor task: serve ``/metrics`` (when a port is set) until cancelled at close."""
    endpoint = MetricsEndpoint.open(config, source, alert)
    if endpoint is None:
        return
    try:
        await asyncio.Event().wait()  # the supervisor's close cancels this task
    finally:
        await asyncio.to_thread(endpoint.close)
