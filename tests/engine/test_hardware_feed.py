"""The live hardware feed: the supervisor sends its newest hardware reading to
consoles as a coalesced, non-durable ``hardware`` message, newest wins per console."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.domain import Event
from engine.hardware_report import HardwareSnapshot
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.channel.console_outbox import ConsoleClient
from engine.wire.protocol import Hello, decode_server
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def run(home: Path, request: pytest.FixtureRequest) -> RunDir:
    """A run with a hardware reading every 0.5 s (``indirect`` parametrization: another interval)."""
    interval_s = getattr(request, "param", 0.5)
    config = build_run_config({"alerts": {"hardware_interval_s": interval_s}}, steps=1000)
    return RunDir.create(config, home=home)


@pytest.mark.slow
async def test_console_gets_hardware_with_engine_processes(run: RunDir, start, connect, fake_env) -> None:
    fake_env(rate_hz=20)
    running = await start()
    client = await connect()
    await client.until(lambda m: m.kind == "telemetry")
    # The first reading comes with the doctor at start (FIRST_DOCTOR_S), then every 0.5 s.
    first, _ = await client.until(lambda m: m.kind == "hardware", timeout=30)
    second, _ = await client.until(lambda m: m.kind == "hardware", timeout=30)
    snapshot = second.snapshot
    assert snapshot.ts > first.snapshot.ts
    roles = {p.role: p for p in snapshot.host.processes}
    assert roles["supervisor"].rss_bytes and roles["supervisor"].cpu_pct is not None
    assert roles["trainer"].pid == running.supervisor.attempts.pid
    assert {d.label for d in snapshot.host.disks} == {"run", "checkpoints"}
    if not snapshot.gpus:  # this machine: no NVML; the reason travels with the reading
        assert snapshot.nvml
    # Non-durable: never stored as an event.
    with Store(run.store, readonly=True) as store:
        assert all(e.type != "hardware" for e in store.events_since(0))


@pytest.mark.slow
@pytest.mark.parametrize("run", [600.0], indirect=True, ids=["next-reading-in-10-min"])
async def test_a_late_console_gets_the_newest_reading_at_once(run: RunDir, start, connect, fake_env) -> None:
    """The next reading is 10 minutes away: the one a late console gets is the one on joining."""
    fake_env(rate_hz=20)
    running = await start()
    first = await connect()
    reading, _ = await first.until(lambda m: m.kind == "hardware", timeout=30)  # the doctor's, at start
    assert running.supervisor.alerts is not None and running.supervisor.alerts.latest is not None
    late = await connect()
    message, _ = await late.until(lambda m: m.kind == "hardware", timeout=30)
    assert message.snapshot == reading.snapshot == running.supervisor.alerts.latest


class _SlowWriter:
    """A console socket whose writes take a while (simulated): readings pile up behind it."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    async def drain(self) -> None:
        await asyncio.sleep(0.05)

    def sent(self) -> list[tuple[str, float | int]]:
        """(kind, reading ts or event seq) of every message written."""
        messages = [decode_server(line) for line in self.lines]
        return [(m.kind, m.snapshot.ts if m.kind == "hardware" else m.event.seq) for m in messages]


async def test_newest_reading_wins_per_console() -> None:
    writer = _SlowWriter()
    client = ConsoleClient(writer, Hello(protocol=1))  # type: ignore[arg-type]
    quiet_writer = _SlowWriter()
    quiet = ConsoleClient(quiet_writer, Hello(protocol=1, telemetry=False))  # type: ignore[arg-type]
    try:
        for ts in range(1, 6):  # offered faster than the socket drains: never queued, replaced
            client.offer_hardware(HardwareSnapshot(ts=float(ts), nvml="NVML: no driver"))
        await until(lambda: writer.lines, what="the first reading", seen=writer.sent)
        client.offer_hardware(HardwareSnapshot(ts=6.0, nvml="NVML: no driver"))  # after it: sent too
        await until(lambda: len(writer.lines) >= 2, what="the reading offered later", seen=writer.sent)
        assert writer.sent() == [("hardware", 5.0), ("hardware", 6.0)]

        # A console that asked for no telemetry gets no readings: an event offered after the
        # reading goes out, and nothing else is left to send.
        quiet.offer_hardware(HardwareSnapshot(ts=1.0))
        quiet.push_event(Event(seq=1, ts=1.0, type="note", message="after the reading"))
        await until(lambda: quiet_writer.lines, what="the event", seen=quiet_writer.sent)
        assert quiet_writer.sent() == [("event", 1)] and quiet._hardware is None
    finally:
        client._pump_task.cancel()
        quiet._pump_task.cancel()
