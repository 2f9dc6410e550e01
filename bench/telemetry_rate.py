"""Telemetry to one console: messages per second against the trainer's step rate.

An in-process supervisor runs the torch-free fake trainer at ``--rate-hz`` steps per second
(far above ``TELEMETRY_HZ``); one console listens for ``--seconds`` and counts the
telemetry messages it gets and the samples each one stood for (``coalesced`` + 1).

    python bench/telemetry_rate.py [--rate-hz 200] [--seconds 5]

Target: at most ``TELEMETRY_HZ`` messages per second (about 10), every step accounted for.
Figures are printed, never asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from engine.config.config_file import build_run_config  # noqa: E402
from engine.run.directory import RunDir  # noqa: E402
from engine.supervisor.daemon import Supervisor  # noqa: E402
from engine.wire import protocol  # noqa: E402

FAKE_TRAINER = Path(__file__).resolve().parents[1] / "tests" / "fakes" / "fake_trainer.py"


async def measure(run: RunDir, seconds: float) -> tuple[int, int, float]:
    """(telemetry messages, samples they stood for, seconds measured)."""
    supervisor = Supervisor(run, [sys.executable, str(FAKE_TRAINER)], stop_grace_s=5.0)
    serving = asyncio.create_task(supervisor.serve())
    await asyncio.wait_for(supervisor.serving.wait(), 30)
    reader, writer = await asyncio.open_unix_connection(str(run.socket), limit=protocol.STREAM_LIMIT)
    writer.write(protocol.encode(protocol.Hello(protocol=protocol.PROTOCOL_VERSION)))
    loop = asyncio.get_running_loop()
    messages = samples = 0
    started: float | None = None
    while started is None or loop.time() - started < seconds:
        line = await protocol.read_line(reader)
        if line is None:
            break
        message = protocol.decode_server(line)
        if message.kind != "telemetry":
            continue
        if started is None:  # count from the first message: start-up is not the rate
            started = loop.time()
            continue
        messages, samples = messages + 1, samples + message.coalesced + 1
    elapsed = loop.time() - (started or loop.time())
    writer.close()
    supervisor.request_stop("bench over")
    await asyncio.wait_for(serving, 30)
    return messages, samples, elapsed


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate-hz", type=float, default=200.0, help="fake trainer steps per second")
    parser.add_argument("--seconds", type=float, default=5.0, help="how long the console listens")
    args = parser.parse_args()
    os.environ.update(FAKE_TRAINER_RATE_HZ=str(args.rate_hz), FAKE_TRAINER_STEPS="10000000")
    home = Path(tempfile.mkdtemp(prefix="mtb", dir="/tmp"))
    try:
        run = RunDir.create(build_run_config(name="bench", steps=10_000_000), home)
        messages, samples, elapsed = asyncio.run(measure(run, args.seconds))
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print(f"telemetry: {messages} messages in {elapsed:.2f} s = {messages / elapsed:.1f}/s")
    print(f"  (limit TELEMETRY_HZ = {protocol.TELEMETRY_HZ:.0f}/s)")
    print(f"samples:   {samples} = {samples / elapsed:.1f}/s (trainer at {args.rate_hz:.0f} steps/s)")
    print(f"coalesced: {samples / max(messages, 1):.1f} samples per message")
    return 0


if __name__ == "__main__":
    sys.exit(main())
