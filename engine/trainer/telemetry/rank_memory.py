"""Every rank's memory and pace, gathered for rank 0's telemetry every few steps.

docs/architecture.md: other ranks report what only they know (their memory) through collectives every
few steps, never every step. One all-gather of seven int64 per rank; rank 0's next step
report carries the list (``TelemetrySample.ranks``) and the console draws a row per rank.

The pace is each rank's own work per step: from the step's start to the moment it reaches
its gradient collective (the boundary micro-batch's backward, where DeepSpeed all-reduces).
A rank's wall time per step is the same on every rank (the collective waits for the slowest),
so only this part tells which rank the others wait for. It includes the last backward's
compute only up to the collective, and under ZeRO-3 the forward's parameter gathers. Beside
it: the time from the collective to the step's end (the communication and the optimizer
step) and the time the rank waited for its batches.

On CUDA the marks are CUDA events recorded on the current stream, so the times are the
device's: the host only queues kernels, and a host clock read after a launch says nothing of
a throttled GPU. The events are read at the next rank report once the device has passed
them (``query``, never a sync on the step path); a step whose events are not done yet is
read at the report after. On the CPU the host clock is the device's.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from engine.domain import RankMemory
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.ranks.rank_group import RankGroup

US_PER_S = 1_000_000  # the pace travels as int64 microseconds in the memory all-gather
NO_PACE = -1  # a rank with no step measured since its last report
MOST_PENDING = 256
"""Steps whose device marks wait to be read, at most: past it the oldest is waited for (a
report every few steps reads them long before; only a device far behind its host gets here)."""


class StepClock(Protocol):
    """Where a rank's step marks come from: ``mark`` is cheap and never waits."""

    def mark(self) -> Any: ...
    def seconds(self, first: Any, then: Any) -> float | None:
        """Seconds from ``first`` to ``then``; None while ``then`` is not reached yet."""

    def wait(self, mark: Any) -> None:
        """Block until ``mark`` is reached."""


class HostClock:
    """``time.perf_counter``: the CPU's own work is its device's."""

    def mark(self) -> float:
        return time.perf_counter()

    def seconds(self, first: float, then: float) -> float | None:
        return then - first

    def wait(self, mark: float) -> None:
        return None


class DeviceClock:
    """CUDA events with timing, recorded on the current stream."""

    def mark(self) -> Any:
        import torch

        event = torch.cuda.Event(enable_timing=True)
        event.record()
        return event

    def seconds(self, first: Any, then: Any) -> float | None:
        if not then.query():
            return None
        return float(first.elapsed_time(then)) / 1000.0  # elapsed_time is milliseconds

    def wait(self, mark: Any) -> None:
        mark.synchronize()


@dataclass
class _Step:
    start: Any
    collective: Any | None
    end: Any
    data_wait_s: float


@dataclass(frozen=True)
class Pace:
    """Mean microseconds per step since the last report (int64, as the all-gather carries them)."""

    own_us: int
    comm_us: int
    data_us: int

    @classmethod
    def none(cls) -> Pace:
        return cls(NO_PACE, NO_PACE, NO_PACE)


class RankPace:
    """This rank's own, communication and data-wait seconds per step, summed between reports."""

    def __init__(self, clock: StepClock | None = None) -> None:
        self.clock: StepClock = clock or HostClock()
        self._start: Any = None
        self._collective: Any = None
        self._data_wait_s = 0.0
        self._pending: deque[_Step] = deque()
        self._sums = [0.0, 0.0, 0.0]  # own, communication, data wait (s)
        self._steps = 0

    def start(self) -> None:
        """A step begins (before any delay chaos adds to it)."""
        self._start, self._collective, self._data_wait_s = self.clock.mark(), None, 0.0

    def at_collective(self) -> None:
        """The step reaches its gradient collective (the last call wins: an OOM redoes it)."""
        self._collective = self.clock.mark()

    def waited_for_data(self, seconds: float) -> None:
        """The step's batches kept it waiting ``seconds`` (host time: the host waited)."""
        self._data_wait_s += seconds

    def finish(self) -> None:
        """The step completed; without a mark (no collective seen) all of it is its own."""
        if self._start is None:
            return
        self._pending.append(_Step(self._start, self._collective, self.clock.mark(), self._data_wait_s))
        self._start = None
        if len(self._pending) > MOST_PENDING:  # read at reports only, unless far behind
            self.clock.wait(self._pending[0].end)
            self._read_done()

    def take(self) -> Pace:
        """The means since the last call over the steps read so far, and start afresh."""
        self._read_done()
        if not self._steps:
            return Pace.none()
        own, comm, data = (round(total / self._steps * US_PER_S) for total in self._sums)
        self._sums, self._steps = [0.0, 0.0, 0.0], 0
        return Pace(own, comm, data)

    def _read_done(self) -> None:
        """Add up the steps whose marks the device has passed, oldest first."""
        while self._pending:
            step = self._pending[0]
            own = self.clock.seconds(step.start, step.collective if step.collective is not None else step.end)
            comm = 0.0 if step.collective is None else self.clock.seconds(step.collective, step.end)
            if own is None or comm is None:
                return  # the device is not there yet: at the next report
            self._pending.popleft()
            self._sums[0] += own
            self._sums[1] += comm
            self._sums[2] += step.data_wait_s
            self._steps += 1


def exchange_memory(group: RankGroup, probe: MemoryProbe, pace: RankPace) -> list[RankMemory]:
    """A collective: every rank's (allocated, reserved, peak, capacity) in bytes and its mean
    own, communication and data-wait seconds per step, rank order."""
    reading = probe.read()
    figures = pace.take()
    mine = [reading.allocated, reading.reserved, reading.peak, reading.capacity]
    rows = group.gather_ints([*mine, figures.own_us, figures.comm_us, figures.data_us])
    return [
        RankMemory(
            rank=r,
            allocated=a,
            reserved=res,
            peak=p,
            capacity=c,
            step_s=_seconds(own),
            comm_s=_seconds(comm),
            data_wait_s=_seconds(data),
        )
        for r, (a, res, p, c, own, comm, data) in enumerate(rows)
    ]


def _seconds(us: int) -> float | None:
    return None if us < 0 else us / US_PER_S
