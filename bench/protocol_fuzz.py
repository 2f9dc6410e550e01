"""A live run's steps/s before, during and after a barrage of distinct malformed inputs.

    python bench/protocol_fuzz.py [--quiet 20] [--seconds 30] [--after 15]
                                  [--connections 200] [--silent 100] [--openers 4]

Starts a tiny run with ``memtui run --detach`` (supervisor + real DeepSpeed trainer, no
checkpoints) in a throwaway MEMTUI_HOME, measures steps/s for ``--quiet`` seconds, then
attacks the socket for ``--seconds``:

- ``--connections`` consoles say hello, then send fresh malformed lines in batches and read
  the Errors (a console that never reads its answers is dropped as too slow, by design);
- ``--silent`` connections never say hello (the supervisor closes each after its hello
  timeout; each is reopened at once);
- ``--openers`` loops open a connection whose first line is malformed, read the Error, and
  open the next.

Every input is distinct (a set of their hashes checks it) and bad: one ``decode_client``
refuses, or a valid message a console may not send (a step report, a trainer event, a
second hello). They come from a hand-written corpus of hostile families (deep nesting,
huge numbers, NaN and Infinity, huge strings, lone surrogates, invalid UTF-8, over-long
lines, wrong kinds, types and fields), each drawn with a fresh size or name, and from
seeded byte mutations of valid messages. Then ``--after`` seconds unattacked, and checks:
the supervisor alive, the run running and advancing, every bad line answered by one Error,
and how much supervisor.log grew. Steps/s of a phase: (last step - first step) / (last ts
- first ts) over the samples the trainer stamped inside it; CPU figures say how much of a
slowdown is contention (this host's cores are shared with the fuzzer itself). Not part of
the test suite (timings are never asserted there).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from engine.domain import TelemetrySample
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import (
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    STREAM_LIMIT,
    Hello,
    Ping,
    ProtocolError,
    Replay,
    Status,
    StepReport,
    TrainerEvent,
    check_hello,
    decode_client,
    decode_server,
    encode,
    read_line,
)

MEMTUI = shutil.which("memtui", path=str(Path(sys.executable).parent)) or "memtui"
BATCH = 20  # lines a console writes before reading their answers
OVER_LONG_EVERY = 1000  # one input in this many is a line over MAX_LINE_BYTES (1 MiB each)
REFUSED_VALID_KINDS = {"hello", "step", "trainer_event"}  # valid, but not from a hello'd console
ERROR_PREFIX = b'{"kind":"error"'

_SAMPLE = TelemetrySample(
    step=1, ts=1.0, samples=1, tokens=1, loss=1.0, lr=1e-3, step_time_s=0.1, tokens_per_s=1.0,
    micro_batch=1, grad_accum=1,
)  # fmt: skip
SEEDS = [
    encode(m)[:-1]
    for m in (
        Ping(id="p"),
        Status(id="s"),
        Replay(id="r", since=123456789),
        Hello(protocol=PROTOCOL_VERSION, role="console", client="fuzz", replay_from=None),
        StepReport(sample=_SAMPLE),
        TrainerEvent(type="fake.tick", message="m", data={"a": [1, 2, {"b": None}]}),
    )
]


# ------------------------------------------------------------------------ inputs


def families(rng: random.Random, n: int) -> list[Callable[[], bytes]]:
    """Hand-written hostile lines; ``n`` (a counter) makes each draw distinct."""

    def size(low: int, high: int) -> int:  # log-uniform: mostly small, now and then huge
        return int(low * (high / low) ** rng.random())

    return [
        lambda: b"[" * size(65, 100_000) + b"]" * size(1, 10),
        lambda: b'{"kind": "ping", "id": "p", "x": ' + b'{"a":' * size(65, 20_000) + b"1",
        lambda: b'{"kind": "hello", "protocol": ' + b"9" * size(20, 20_000) + b"}",
        lambda: b'{"kind": "replay", "id": "r", "since": -' + b"1" * size(20, 5000) + b"}",
        lambda: b'{"kind": "step", "sample": {"step": %d}}' % (2**63 + n),
        lambda: rng.choice([b"NaN", b"Infinity", b"-Infinity"]) + b" " * (n % 50),
        lambda: b'{"kind": "hello", "protocol": %s, "n": %d}' % (rng.choice([b"NaN", b"Infinity"]), n),
        lambda: b'{"kind": "' + b"k" * size(1, 100_000) + b'"}',
        lambda: b'{"kind": "ping", "id": "' + b"i" * size(65, 100_000) + b'"}',
        lambda: b'{"kind": "ping", "id": "p", "' + b"f" * size(1, 100_000) + b'": 1}',
        lambda: b'{"kind": "ping", "id": "\\ud%03x"}' % rng.randint(0x800, 0xFFF) + b" " * (n % 100),
        lambda: b'{"kind": "status", "id": %d}' % n,
        lambda: b'{"kind": "replay", "id": "r%d", "since": "soon"}' % n,
        lambda: b'{"kind": "launch_%d"}' % n,
        lambda: b'{"kind": "ping", "id": "p", "extra_%d": 1}' % n,
        lambda: bytes(rng.randrange(256) for _ in range(size(1, 200))).replace(b"\n", b"\xff"),
        lambda: b'{"kind": "ping", "id": "\xc3\x28%d"}' % n,  # invalid UTF-8
        lambda: encode(TrainerEvent(type="run_ended", data={"n": n}))[:-1],  # forged supervisor event
        lambda: encode(Hello(protocol=PROTOCOL_VERSION + 1 + n))[:-1],
    ]


def over_long(n: int) -> bytes:
    return b"%d" % n + b" " * MAX_LINE_BYTES


def mutated(rng: random.Random) -> bytes:
    """A valid line with bytes flipped, cut, inserted or repeated."""
    line = bytearray(rng.choice(SEEDS))
    for _ in range(rng.randint(1, 6)):
        at = rng.randrange(max(1, len(line)))
        action = rng.randrange(4)
        if action == 0 and line:
            line[at] = rng.randrange(256)
        elif action == 1:
            del line[at : at + rng.randint(1, 20)]
        elif action == 2:
            line[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 8)))
        else:
            line[at:at] = line[at : at + 16] * rng.randint(1, 200)
    return bytes(line).replace(b"\n", b"\\")


@dataclass
class Inputs:
    """Distinct bad lines, drawn half from the corpus and half by mutation; each is yielded
    once, so every line sent is a distinct input."""

    rng: random.Random = field(default_factory=lambda: random.Random(12))
    seen: set[int] = field(default_factory=set)
    rejected: int = 0  # drawn but not sent: a duplicate, blank, or a message a console may send

    def __iter__(self) -> Iterator[bytes]:
        n = 0
        while True:
            n += 1
            if n % OVER_LONG_EVERY == 0:
                line = over_long(n)
            elif n % 2:
                line = self.rng.choice(families(self.rng, n))()
            else:
                line = mutated(self.rng)
            key = hash(line)
            if key in self.seen or not line.strip() or not self._bad(line):
                self.rejected += 1
                continue
            self.seen.add(key)
            yield line

    @staticmethod
    def _bad(line: bytes) -> bool:
        try:
            return decode_client(line).kind in REFUSED_VALID_KINDS
        except ProtocolError:
            return True


# ------------------------------------------------------------------------ attackers


@dataclass
class Tally:
    sent: int = 0
    errors: int = 0
    bad_hellos: int = 0
    silent: int = 0  # connections that never said hello
    dropped: int = 0  # consoles the supervisor closed on us
    open_now: int = 0
    open_max: int = 0
    consoles: int = 0

    def opened(self) -> None:
        self.open_now += 1
        self.open_max = max(self.open_max, self.open_now)


async def connect(run: RunDir, tally: Tally) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_unix_connection(str(run.socket), limit=STREAM_LIMIT)
    tally.opened()
    return reader, writer


def close(writer: asyncio.StreamWriter, tally: Tally) -> None:
    writer.close()
    tally.open_now -= 1


async def errors(reader: asyncio.StreamReader, count: int) -> int:
    """Read until ``count`` Errors (live events come too); fewer if the connection ends."""
    seen = 0
    while seen < count:
        line = await read_line(reader)
        if line is None:
            break
        seen += line.startswith(ERROR_PREFIX)
    return seen


async def console(run: RunDir, inputs: Iterator[bytes], deadline: float, tally: Tally) -> None:
    reader, writer = await connect(run, tally)
    try:
        writer.write(encode(Hello(protocol=PROTOCOL_VERSION, client="fuzz", telemetry=False)))
        welcome = await read_line(reader)
        assert welcome is not None and decode_server(welcome).kind == "welcome", welcome
        tally.consoles += 1
        while time.monotonic() < deadline:
            lines = [next(inputs) for _ in range(BATCH)]
            writer.write(b"".join(line + b"\n" for line in lines))
            await writer.drain()
            tally.sent += len(lines)
            got = await errors(reader, len(lines))
            tally.errors += got
            if got < len(lines):
                tally.dropped += 1
                return
    finally:
        close(writer, tally)


async def silent(run: RunDir, deadline: float, tally: Tally) -> None:
    while time.monotonic() < deadline:
        reader, writer = await connect(run, tally)
        try:
            left = deadline - time.monotonic()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(errors(reader, 1), max(0.0, left))
                tally.silent += 1  # the supervisor gave up on us: reopen
        finally:
            close(writer, tally)


def bad_first_line(line: bytes) -> bool:
    """A line the supervisor refuses as a connection's first (a console's valid hello is not)."""
    try:
        return check_hello(decode_client(line)).role == "trainer"  # one trainer is connected
    except ProtocolError:
        return True


async def opener(run: RunDir, inputs: Iterator[bytes], deadline: float, tally: Tally) -> None:
    while time.monotonic() < deadline:
        line = next(inputs)
        while not bad_first_line(line):
            line = next(inputs)  # to a console, later in its conversation
        reader, writer = await connect(run, tally)
        try:
            writer.write(line + b"\n")
            tally.sent += 1
            got = await errors(reader, 1)  # awaited first: ``+= await`` would lose others' counts
            tally.errors += got
            tally.bad_hellos += 1
        finally:
            close(writer, tally)


async def barrage(run: RunDir, args: argparse.Namespace, inputs: Inputs, tally: Tally) -> None:
    deadline = time.monotonic() + args.seconds
    stream = iter(inputs)
    tasks = [console(run, stream, deadline, tally) for _ in range(args.connections)]
    tasks += [silent(run, deadline, tally) for _ in range(args.silent)]
    tasks += [opener(run, stream, deadline, tally) for _ in range(args.openers)]
    await asyncio.gather(*tasks)


# ------------------------------------------------------------------------ the run


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (/proc/PID/stat, in clock ticks)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def steps_between(run: RunDir, start: float, end: float) -> tuple[float, int]:
    """Steps/s and steps stamped in [start, end]."""
    with Store(run.store, readonly=True) as store:
        inside = [s for s in store.steps() if start <= s.ts <= end]
    if len(inside) < 2 or inside[-1].ts <= inside[0].ts:
        return float("nan"), len(inside)
    return (inside[-1].step - inside[0].step) / (inside[-1].ts - inside[0].ts), len(inside)


def start_run(home: Path) -> RunDir:
    config = home / "fuzz.toml"
    config.write_text('name = "fuzz"\npreset = "tiny"\nsteps = 1000000\n[checkpoint]\nevery_steps = 0\n')
    env = {**os.environ, "MEMTUI_HOME": str(home)}
    out = subprocess.run(
        [MEMTUI, "run", str(config), "--detach", "--json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return RunDir(Path(json.loads(out.stdout)["run_dir"]))


def latest_step(run: RunDir) -> int:
    with Store(run.store, readonly=True) as store:
        latest = store.latest_step()
    return latest.step if latest is not None else 0


def wait_for_step(run: RunDir, step: int, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while latest_step(run) < step:
        if time.monotonic() > deadline:
            raise TimeoutError(f"the run did not reach step {step} in {timeout_s:g} s")
        time.sleep(0.2)


async def run_state(run: RunDir) -> str:
    reader, writer = await asyncio.open_unix_connection(str(run.socket), limit=STREAM_LIMIT)
    try:
        writer.write(encode(Hello(protocol=PROTOCOL_VERSION, client="fuzz check", telemetry=False)))
        writer.write(encode(Status(id="after")))
        while True:
            line = await asyncio.wait_for(read_line(reader), 10)
            assert line is not None, "the supervisor closed the check connection"
            message = decode_server(line)
            if message.kind in ("ok", "error") and message.id == "after":
                return str(message.result["state"]) if message.kind == "ok" else message.reason
    finally:
        writer.close()


@dataclass
class Phase:
    name: str
    start: float = 0.0
    end: float = 0.0
    supervisor_cpu_s: float = 0.0
    trainer_cpu_s: float = 0.0
    load: float = 0.0

    def measure(self, supervisor: int, trainer: int, action: Callable[[], object]) -> None:
        before = cpu_s(supervisor), cpu_s(trainer)
        self.start = time.time()
        action()
        self.end = time.time()
        self.supervisor_cpu_s = cpu_s(supervisor) - before[0]
        self.trainer_cpu_s = cpu_s(trainer) - before[1]
        self.load = os.getloadavg()[0]

    def report(self, run: RunDir) -> str:
        rate, _ = steps_between(run, self.start, self.end)
        seconds = self.end - self.start
        per_step = self.trainer_cpu_s / (rate * seconds) * 1000 if rate > 0 else float("nan")
        return (
            f"{self.name:<7} {seconds:5.1f} s: {rate:6.2f} steps/s; trainer {per_step:.0f} CPU-ms/step;"
            f" supervisor {self.supervisor_cpu_s / seconds:.2f} CPU-s/s; load {self.load:.2f}"
        )


def log_size(run: RunDir) -> tuple[int, int, int]:
    """supervisor.log: bytes, lines, lines about bad input."""
    text = run.supervisor_log.read_bytes()
    about_bad = sum(
        1
        for line in text.splitlines()
        if b"bad input" in line or b"suppressed" in line or b"bad inputs" in line
    )
    return len(text), text.count(b"\n"), about_bad


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", type=float, default=20.0, help="seconds measured before the attack")
    parser.add_argument("--seconds", type=float, default=30.0, help="seconds of attack")
    parser.add_argument("--after", type=float, default=15.0, help="seconds measured after the attack")
    parser.add_argument("--connections", type=int, default=200, help="consoles sending bad lines")
    parser.add_argument("--silent", type=int, default=100, help="connections that never say hello")
    parser.add_argument("--openers", type=int, default=4, help="loops opening bad-hello connections")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="mtz", dir="/tmp"))
    run = start_run(home)
    phases = [Phase("quiet"), Phase("attack"), Phase("after")]
    inputs, tally = Inputs(), Tally()
    try:
        wait_for_step(run, 30)  # past start-up
        with Store(run.store, readonly=True) as store:
            trainer = store.read_meta().trainer_pid
        supervisor = run.supervisor_pid()
        assert trainer is not None and supervisor is not None, "the run is not up"
        phases[0].measure(supervisor, trainer, lambda: time.sleep(args.quiet))
        log_before = log_size(run)
        own_cpu = time.process_time()
        phases[1].measure(supervisor, trainer, lambda: asyncio.run(barrage(run, args, inputs, tally)))
        own_cpu = time.process_time() - own_cpu
        at_attack_end = latest_step(run)
        phases[2].measure(supervisor, trainer, lambda: time.sleep(args.after))
        time.sleep(1.0)  # the supervisor flushes steps every 0.5 s
        alive = run.supervisor_pid() is not None
        state = asyncio.run(run_state(run)) if alive else "(supervisor gone)"
        advanced = latest_step(run) - at_attack_end
        log_after = log_size(run)
        lines = [phase.report(run) for phase in phases]
    finally:
        subprocess.run(
            [MEMTUI, "stop", run.run_id], env={**os.environ, "MEMTUI_HOME": str(home)}, capture_output=True
        )
        shutil.rmtree(home, ignore_errors=True)
    print("\n".join(lines))
    print(
        f"inputs: {tally.sent} distinct bad lines sent, {tally.errors} Errors back"
        f" ({len(inputs.seen)} drawn, {inputs.rejected} draws discarded as duplicate, blank or valid)"
    )
    print(
        f"connections: {tally.consoles} consoles held through the attack ({tally.dropped} dropped),"
        f" {args.silent} silent at a time ({tally.silent} timed out by the supervisor),"
        f" {tally.bad_hellos} bad-first-line connections; {tally.open_max} open at once;"
        f" fuzzer {own_cpu:.1f} CPU-s; {os.cpu_count()} CPUs"
    )
    print(
        f"after: supervisor {'alive' if alive else 'GONE'}, run {state}, {advanced} steps after the attack;"
        f" supervisor.log +{log_after[0] - log_before[0]} bytes, +{log_after[1] - log_before[1]} lines"
        f" ({log_after[2] - log_before[2]} about bad input)"
    )


if __name__ == "__main__":
    main()
