"""A rank's own step time: from the step's start to its gradient collective (the wait for
other ranks after it does not count), averaged between two rank reports; beside it the
collective-to-end time and the data wait. On CUDA the marks are device events, read once
the device has passed them: a fake event source whose device times differ from the host's
stands in for CUDA here."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from engine.trainer.telemetry import rank_memory
from engine.trainer.telemetry.rank_memory import MOST_PENDING, NO_PACE, HostClock, Pace, RankPace


def test_the_pace_ends_at_the_collective_and_is_averaged_between_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # start, collective, end of each step (the last has no collective: one rank)
    clock = iter([0.0, 0.2, 1.0, 5.0, 5.4, 6.0, 20.0, 20.5])
    monkeypatch.setattr(rank_memory.time, "perf_counter", lambda: next(clock))
    pace = RankPace()
    assert pace.take() == Pace.none()  # no step since the last report
    for waited in (0.1, 0.3):  # 0.2 s then 0.4 s of its own, the rest in the all-reduce
        pace.start()
        pace.waited_for_data(waited)
        pace.at_collective()
        pace.finish()
    pace.start()
    pace.finish()  # a step without a collective: its wall time is its own, 0.5 s
    assert pace.take() == Pace(
        own_us=round((0.2 + 0.4 + 0.5) / 3 * 1_000_000),
        comm_us=round((0.8 + 0.6 + 0.0) / 3 * 1_000_000),
        data_us=round((0.1 + 0.3 + 0.0) / 3 * 1_000_000),
    )
    assert pace.take().own_us == NO_PACE


@dataclass
class FakeEvent:
    device_s: float
    """When the device reaches it (its own clock)."""


class FakeDevice:
    """Events stamped with a device time; reached once the device's clock has passed them.
    The host's clock is never read: a host that only queues work measures nothing."""

    def __init__(self) -> None:
        self.queued_s = 0.0  # device time of the work queued so far
        self.done_s = 0.0  # how far the device has got
        self.waited: list[FakeEvent] = []

    def run(self, seconds: float) -> None:
        """The host queues ``seconds`` of device work (and returns at once)."""
        self.queued_s += seconds

    def mark(self) -> FakeEvent:
        return FakeEvent(self.queued_s)

    def seconds(self, first: FakeEvent, then: FakeEvent) -> float | None:
        return then.device_s - first.device_s if then.device_s <= self.done_s else None

    def wait(self, mark: FakeEvent) -> None:
        self.waited.append(mark)
        self.done_s = max(self.done_s, mark.device_s)


def test_device_time_is_read_from_the_events_once_the_device_has_passed_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(rank_memory.time, "perf_counter", lambda: pytest.fail("the host clock was read"))
    device = FakeDevice()
    pace = RankPace(device)
    for own, comm in ((0.3, 0.1), (0.5, 0.1)):  # a throttled GPU: the host saw only launches
        pace.start()
        device.run(own)
        pace.at_collective()
        device.run(comm)
        pace.finish()
    device.done_s = 0.4  # the device finished the first step only
    assert pace.take() == Pace(own_us=300_000, comm_us=100_000, data_us=0)
    assert pace.take() == Pace.none()  # the second is not done: not guessed, not waited for
    device.done_s = 1.0
    assert pace.take() == Pace(own_us=500_000, comm_us=100_000, data_us=0)  # read at the next report
    assert device.waited == []  # no sync on the step path


def test_a_device_far_behind_is_waited_for_only_past_the_bound() -> None:
    device = FakeDevice()
    pace = RankPace(device)
    for _ in range(MOST_PENDING + 1):
        pace.start()
        device.run(0.01)
        pace.finish()
    assert len(device.waited) == 1  # the oldest step's end, once
    assert pace.take().own_us == 10_000


def test_the_host_clock_is_the_default() -> None:
    assert isinstance(RankPace().clock, HostClock)
