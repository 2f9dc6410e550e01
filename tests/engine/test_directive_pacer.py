"""The directive pacer: a burst is answered at once, then requests are spaced at the rate."""

from __future__ import annotations

import pytest

from engine.directives.pacer import DirectivePacer


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def test_burst_then_paced_then_refilled() -> None:
    clock = Clock()
    pacer = DirectivePacer(rate_per_s=100.0, burst=5, min_sleep_s=0.0, clock=clock)
    assert [pacer.delay() for _ in range(5)] == [0.0] * 5  # an operator never waits
    waits = [pacer.delay() for _ in range(3)]  # each reserves its place in line
    assert waits == pytest.approx([0.01, 0.02, 0.03])
    clock.now += 0.03  # the line has been served
    assert pacer.delay() == pytest.approx(0.01)
    clock.now += 10.0  # idle: the bucket refills, but only to the burst
    assert [pacer.delay() for _ in range(5)] == [0.0] * 5
    assert pacer.delay() > 0


def test_ten_thousand_take_at_least_their_share_of_time() -> None:
    clock = Clock()
    pacer = DirectivePacer(rate_per_s=1000.0, burst=200, min_sleep_s=0.0, clock=clock)
    last = max(pacer.delay() for _ in range(10_000))
    assert last == pytest.approx((10_000 - 200) / 1000.0)


def test_short_waits_are_carried_over_so_requests_go_in_batches() -> None:
    clock = Clock()
    pacer = DirectivePacer(rate_per_s=500.0, burst=1, min_sleep_s=0.02, clock=clock)
    slept = 0.0
    sleeps = 0
    for _ in range(1001):  # a paced flood: sleep whatever delay() says, as the supervisor does
        wait = pacer.delay()
        if wait > 0:
            assert wait >= 0.02
            clock.now += wait
            slept += wait
            sleeps += 1
    assert slept == pytest.approx(1000 / 500.0, abs=0.03)  # the same pace overall
    assert sleeps <= 1000 / 10 + 1  # but one wake-up per ~10 requests, not per request
