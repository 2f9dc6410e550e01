"""A console's outbox in the supervisor: a sample waiting for its turn takes the run's newest state."""

from __future__ import annotations

import asyncio

from engine.domain import Event, TelemetrySample
from engine.supervisor.channel.console_outbox import ConsoleClient
from engine.wire.protocol import PROTOCOL_VERSION, EventMessage, Hello, Telemetry, decode_server
from tests.waiting import until


def make_sample(step: int) -> TelemetrySample:
    return TelemetrySample(
        step=step, ts=float(step), samples=8 * step, tokens=1024 * step, loss=2.0, lr=1e-3,
        step_time_s=0.05, tokens_per_s=2e4, micro_batch=8, grad_accum=1,
    )  # fmt: skip


class Writer:
    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    async def drain(self) -> None:
        await asyncio.sleep(0)


async def test_a_waiting_sample_goes_out_with_the_state_changed_after_it() -> None:
    writer = Writer()
    client = ConsoleClient(writer, Hello(protocol=PROTOCOL_VERSION))  # type: ignore[arg-type]
    try:
        client.offer_telemetry(make_sample(1), "running")  # goes out at once
        await until(lambda: len(writer.lines) == 1, what="the first sample", seen=lambda: writer.lines)
        client.offer_telemetry(make_sample(2), "running")  # waits: at most TELEMETRY_HZ
        paused = Event(seq=7, ts=1.0, type="state_changed", data={"from": "running", "to": "paused"})
        client.push_event(paused)
        await until(
            lambda: len(writer.lines) == 3, what="the event and the sample", seen=lambda: writer.lines
        )
        sent = [decode_server(line) for line in writer.lines[1:]]
        telemetry = next(m for m in sent if isinstance(m, Telemetry))
        assert any(isinstance(m, EventMessage) for m in sent)
        assert telemetry.sample.step == 2 and telemetry.state == "paused"  # not back to "running"
    finally:
        client.closed = True
        client._pump_task.cancel()
