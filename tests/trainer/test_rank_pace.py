"""A rank's own step time: from the step's start to its gradient collective (the wait for
other ranks after it does not count), averaged between two rank reports."""

from __future__ import annotations

import pytest

from engine.trainer.telemetry import rank_memory
from engine.trainer.telemetry.rank_memory import NO_PACE, RankPace


def test_the_pace_ends_at_the_collective_and_is_averaged_between_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([0.0, 0.2, 5.0, 5.4, 20.0, 20.5])  # start, collective, ..., start, finish
    monkeypatch.setattr(rank_memory.time, "perf_counter", lambda: next(clock))
    pace = RankPace()
    assert pace.take_us() == NO_PACE  # no step since the last report
    for _ in range(2):  # 0.2 s then 0.4 s of its own, the rest waiting in the all-reduce
        pace.start()
        pace.at_collective()
        pace.finish()
    pace.start()
    pace.finish()  # a step without a collective (one rank): its wall time, 0.5 s
    assert pace.take_us() == round((0.2 + 0.4 + 0.5) / 3 * 1_000_000)
    assert pace.take_us() == NO_PACE
