"""The live hardware feed: the supervisor sends its newest hardware reading to
consoles as a coalesced, non-durable ``hardware`` message, newest wins per console."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from engine.config_file import build_run_config
from engine.hardware_report import HardwareSnapshot
from engine.protocol import Hello, decode_server
from engine.run.directory import RunDir
from engine.run.store import Store
from engine.supervisor.console_outbox import ConsoleClient

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def run(home: Path) -> RunDir:
    config = build_run_config({"alerts": {"hardware_interval_s": 0.5}}, steps=1000)
    return RunDir.create(config, home=home)


async def test_console_gets_hardware_with_engine_processes(run: RunDir, start, connect, fake_env) -> None:
    fake_env(rate_hz=20)
    running = await start()
    client = await connect()
    await client.until(lambda m: m.kind == "telemetry")
    # The first reading comes with the doctor at start (FIRST_DOCTOR_S), then every 0.5 s.
    first, _ = await client.until(lambda m: m.kind == "hardware", timeout=10)
    second, _ = await client.until(lambda m: m.kind == "hardware", timeout=5)
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


async def test_a_late_console_gets_the_newest_reading_at_once(run: RunDir, start, connect, fake_env) -> None:
    fake_env(rate_hz=20)
    running = await start()
    first = await connect()
    await first.until(lambda m: m.kind == "hardware", timeout=10)
    assert running.supervisor.alerts is not None and running.supervisor.alerts.latest is not None
    late = await connect()
    message, _ = await late.until(lambda m: m.kind == "hardware", timeout=2)
    assert message.snapshot.ts <= running.supervisor.alerts.latest.ts


class _SlowWriter:
    """A console socket whose writes take a while: readings pile up behind it."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    async def drain(self) -> None:
        await asyncio.sleep(0.05)


async def test_newest_reading_wins_per_console() -> None:
    writer = _SlowWriter()
    client = ConsoleClient(writer, Hello(protocol=1))  # type: ignore[arg-type]
    for ts in range(1, 6):  # offered faster than the socket drains: never queued, replaced
        client.offer_hardware(HardwareSnapshot(ts=float(ts), nvml="NVML: no driver"))
    await asyncio.sleep(0.2)
    sent = [decode_server(line) for line in writer.lines]
    assert [m.snapshot.ts for m in sent if m.kind == "hardware"] == [5.0]
    quiet = ConsoleClient(_SlowWriter(), Hello(protocol=1, telemetry=False))  # type: ignore[arg-type]
    quiet.offer_hardware(HardwareSnapshot(ts=1.0))
    await asyncio.sleep(0.1)
    assert quiet.writer.lines == []  # type: ignore[attr-defined]
    client._pump_task.cancel()
    quiet._pump_task.cancel()
