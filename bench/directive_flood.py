"""The real trainer's step rate before, during and after a flood of 10,000 directives.

    python bench/directive_flood.py [--seconds 15] [--count 10000] [--preset tiny]

Starts a tiny run with ``memtui run --detach`` (supervisor + DeepSpeed trainer, no
checkpoints), measures steps/s for ``--seconds`` quietly, then while one client floods
``--count`` Propose messages over the socket (500 at a time, reading the answers, as a
console would: a client that never reads is dropped as too slow), then ``--seconds``
after. Steps/s of a phase: (last step - first step) / (last ts - first ts) over the step
samples the trainer stamped inside it. Per phase it also prints the trainer's CPU time per
step (steady if only CPU contention slowed it), the supervisor's CPU use and the host's
1-minute load average (other work on the host skews every figure); then the verdicts the
store kept, the flooding client's CPU and a second client's Ping round trips meanwhile.
Not part of the test suite (timings are never asserted there).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import (
    PROTOCOL_VERSION,
    STREAM_LIMIT,
    Hello,
    Ping,
    Propose,
    decode_server,
    encode,
    read_line,
)

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"
BATCH = 500  # proposals written before reading their answers


class Connection:
    """One console connection: Hello, then requests and their Ok/Error answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, run: RunDir) -> Connection:
        reader, writer = await asyncio.open_unix_connection(str(run.socket), limit=STREAM_LIMIT)
        writer.write(encode(Hello(protocol=PROTOCOL_VERSION, client="flood bench", telemetry=False)))
        connection = cls(reader, writer)
        await connection.answers(1, kinds=("welcome",))
        return connection

    async def answers(self, count: int, kinds: tuple[str, ...] = ("ok", "error")) -> int:
        """Read until ``count`` messages of ``kinds``; returns how many were Ok."""
        seen = ok = 0
        while seen < count:
            line = await read_line(self.reader)
            if line is None:
                raise ConnectionError("the supervisor closed the connection")
            message = decode_server(line)
            if message.kind in kinds:
                seen += 1
                ok += message.kind == "ok"
        return ok

    def close(self) -> None:
        self.writer.close()


async def flood(run: RunDir, count: int) -> list[float]:
    """Flood ``count`` Propose messages; a second client's Ping round trips (s) meanwhile."""
    flooder, pinger = await Connection.open(run), await Connection.open(run)
    pings: list[float] = []
    try:
        for first in range(0, count, BATCH):
            for i in range(first, min(count, first + BATCH)):
                flooder.writer.write(
                    encode(Propose(id=f"f{i}", values={"lr_multiplier": 0.5}, source="flood"))
                )
            await flooder.writer.drain()
            sent = time.perf_counter()
            pinger.writer.write(encode(Ping(id=f"p{first}")))
            await pinger.answers(1)
            pings.append(time.perf_counter() - sent)
            await flooder.answers(min(count, first + BATCH) - first)
    finally:
        flooder.close()
        pinger.close()
    return pings


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steps_per_s(run: RunDir, start: float, end: float) -> float:
    with Store(run.store, readonly=True) as store:
        inside = [s for s in store.steps() if start <= s.ts <= end]
    if len(inside) < 2 or inside[-1].ts <= inside[0].ts:
        return float("nan")
    return (inside[-1].step - inside[0].step) / (inside[-1].ts - inside[0].ts)


def start_run(home: Path, preset: str) -> RunDir:
    config = home / "flood.toml"
    config.write_text(
        f'name = "flood"\npreset = "{preset}"\nsteps = 1000000\n[checkpoint]\nevery_steps = 0\n'
    )
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    out = subprocess.run(
        [MEMTUI, "run", str(config), "--detach", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return RunDir(Path(json.loads(out.stdout)["run_dir"]))


def wait_for_steps(run: RunDir, steps: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with Store(run.store, readonly=True) as store:
            latest = store.latest_step()
        if latest is not None and latest.step >= steps:
            return
        time.sleep(0.2)
    raise TimeoutError(f"the run did not reach step {steps} in {timeout_s:g} s")


@dataclass
class Phase:
    """One measured stretch of the run: wall-clock bounds and what each process spent."""

    name: str
    start: float = 0.0
    end: float = 0.0
    supervisor_cpu_s: float = 0.0
    trainer_cpu_s: float = 0.0
    load: float = 0.0  # the host's 1-minute load average at the end

    def report(self, run: RunDir) -> str:
        rate = steps_per_s(run, self.start, self.end)
        seconds = self.end - self.start
        steps = rate * seconds
        per_step = self.trainer_cpu_s / steps * 1000 if steps > 0 else float("nan")
        return (
            f"{self.name:<6} {seconds:5.1f} s: {rate:5.1f} steps/s;"
            f" trainer {per_step:.1f} CPU-ms/step; supervisor {self.supervisor_cpu_s / seconds:.2f} CPU-s/s;"
            f" load {self.load:.2f}"
        )


def measured(phase: Phase, supervisor: int, trainer: int, action: Callable[[], Any]) -> Any:
    """Run ``action`` as ``phase``, recording wall clock and both processes' CPU."""
    before = cpu_s(supervisor), cpu_s(trainer)
    phase.start = time.time()
    result = action()
    phase.end = time.time()
    phase.supervisor_cpu_s = cpu_s(supervisor) - before[0]
    phase.trainer_cpu_s = cpu_s(trainer) - before[1]
    phase.load = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=15.0, help="length of the quiet and after phases")
    parser.add_argument("--count", type=int, default=10_000, help="Propose messages in the flood")
    parser.add_argument("--preset", default="tiny", choices=["tiny", "small"])
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="mtf", dir="/tmp"))
    run = start_run(home, args.preset)
    phases = [Phase("quiet"), Phase("flood"), Phase("after")]
    try:
        wait_for_steps(run, 30)  # past start-up (the first steps build kernels)
        with Store(run.store, readonly=True) as store:
            trainer = store.read_meta().trainer_pid
        assert trainer is not None, "no trainer is running"
        supervisor = run.supervisor_pid()
        assert supervisor is not None, "the supervisor is gone"
        measured(phases[0], supervisor, trainer, lambda: time.sleep(args.seconds))
        own_before = time.process_time()
        pings = measured(phases[1], supervisor, trainer, lambda: asyncio.run(flood(run, args.count)))
        client_cpu = time.process_time() - own_before
        measured(phases[2], supervisor, trainer, lambda: time.sleep(args.seconds))
        time.sleep(1.0)  # the supervisor flushes steps and verdicts every 0.5 s
        with Store(run.store, readonly=True) as store:
            kept = len(store.decisions())
        lines = [phase.report(run) for phase in phases]
    finally:
        subprocess.run(
            [MEMTUI, "stop", run.run_id], env={**os.environ, "MEMTUI_HOME": str(home)}, capture_output=True
        )
        shutil.rmtree(home, ignore_errors=True)
    print("\n".join(lines))
    print(
        f"flood: {args.count} Propose, {kept} verdicts stored, flooding client {client_cpu:.2f} CPU-s;"
        f" Ping round trip median {statistics.median(pings) * 1000:.1f} ms,"
        f" max {max(pings) * 1000:.1f} ms over {len(pings)}; {os.cpu_count()} CPUs"
    )


if __name__ == "__main__":
    main()
