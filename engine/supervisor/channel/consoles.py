"""The consoles connected to the supervisor: every console's outbox, and the fan-out to them.

Events, telemetry and hardware readings go to each outbox (``ConsoleClient``), which never
blocks the caller; a console its outbox dropped as too slow leaves the set here. Torch-free.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from engine.domain import Event, RunState, TelemetrySample
from engine.hardware_report import HardwareSnapshot
from engine.supervisor.channel.console_outbox import ConsoleClient


class Consoles:
    """The outboxes of the consoles connected now."""

    def __init__(self) -> None:
        self._clients: set[ConsoleClient] = set()

    def add(self, client: ConsoleClient) -> None:
        self._clients.add(client)

    def discard(self, client: ConsoleClient) -> None:
        self._clients.discard(client)

    def __iter__(self) -> Iterator[ConsoleClient]:
        """The open outboxes (a copy: the set may change while the caller iterates)."""
        for client in list(self._clients):
            if client.closed:
                self._clients.discard(client)
            else:
                yield client

    def push_event(self, event: Event) -> None:
        for client in self:
            client.push_event(event)

    def offer_telemetry(self, sample: TelemetrySample, state: RunState) -> None:
        for client in self:
            client.offer_telemetry(sample, state)

    def offer_hardware(self, snapshot: HardwareSnapshot) -> None:
        """A new hardware reading (newest wins per console; never blocks)."""
        for client in self:
            client.offer_hardware(snapshot)

    async def drain(self, timeout: float) -> None:
        """Give every console up to ``timeout`` s to receive what is queued for it."""
        await asyncio.gather(*(client.drain(timeout) for client in self))

    async def close(self) -> None:
        clients, self._clients = list(self._clients), set()
        for client in clients:
            await client.close()
