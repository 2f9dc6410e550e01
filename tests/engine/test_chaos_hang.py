"""The ``hang`` kind's contract: its parameters, its words, the recovery the supervisor waits
for (the hung step completes, or the hang recovery's restart trains), that an unattended
schedule does not draw it unasked, and the real supervisor (fake trainer) advertising it,
handing it to the trainer and judging it."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from engine.chaos.config import default_kinds
from engine.chaos.kinds.hang import DEFAULT_HANG_S, Hang
from engine.chaos.table import chaos_specs, parse_request
from engine.events import ChaosRecovered
from engine.supervisor.chaos.recovery import Pending, RecoveryTracker
from engine.wire.protocol import Chaos
from memtui.chaos.chaos_phrases import what_happens
from tests.engine.test_chaos_recovery import applied_by
from tests.engine.test_chaos_recovery import step as sample
from tests.engine.test_chaos_supervisor import is_event


def applied_hang(tracker: RecoveryTracker, at: int) -> None:
    tracker.injected(Pending("c1", "hang", {"seconds": 30.0, "rank": -1}, 0.0, 1))
    assert tracker.on_event(applied_by("hang", at, attempt=1), 1.0) == []  # in force, not over


def test_a_hang_is_a_trainer_kind_with_bounded_seconds_and_a_rank() -> None:
    spec = chaos_specs(["hang"])[0]
    assert spec.performer == "trainer" and [p.name for p in spec.params] == ["seconds", "rank"]
    assert parse_request("hang", {}) == Hang(seconds=DEFAULT_HANG_S, rank=-1)
    with pytest.raises(ValidationError, match="seconds"):
        parse_request("hang", {"seconds": 0})
    with pytest.raises(ValidationError, match="rank"):
        parse_request("hang", {"rank": -2})


def test_its_words_say_how_long_and_where() -> None:
    assert what_happens("hang", {"seconds": 30}) == "block the next step for 30 s, as a hung collective does"
    assert what_happens("hang", {"seconds": 30, "rank": 1}).endswith(
        "for 30 s on rank 1 alone, as a hung collective does"
    )


def test_recovered_when_the_hung_step_completes() -> None:
    tracker = RecoveryTracker(600.0)
    applied_hang(tracker, at=5)
    assert tracker.on_step(sample(5), 1.0) == []  # the step before it
    [verdict] = tracker.on_step(sample(6), 31.0)  # the hung step, as telemetry numbers it
    assert verdict.recovered and verdict.step == 6 and "completed after the hang" in verdict.detail


def test_recovered_when_the_hang_recovery_restarts_the_trainer() -> None:
    tracker = RecoveryTracker(600.0)
    applied_hang(tracker, at=5)
    [verdict] = tracker.on_step(sample(3, attempt=2), 700.0)  # resumed from an older checkpoint
    assert verdict.recovered and "attempt 1, which held it, ended; attempt 2 trains" in verdict.detail


def test_the_schedule_never_draws_it_unasked() -> None:
    assert "hang" not in default_kinds()


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_the_supervisor_hands_it_to_the_trainer_and_judges_it(start, connect, fake_env) -> None:
    await start()
    client = await connect()
    welcome = await client.recv()
    assert "hang" in [spec.kind for spec in welcome.chaos]
    await client.until(lambda m: m.kind == "telemetry", what="a step")
    ok, _ = await client.answer(Chaos(id="h", request=Hang(seconds=5)))
    assert ok.kind == "ok" and ok.result["kind"] == "hang"
    recovered, _ = await client.until(is_event("chaos_recovered", chaos_id=ok.result["chaos_id"]))
    verdict = ChaosRecovered.of(recovered.event)
    assert verdict is not None and verdict.recovered and "completed after the hang" in verdict.detail
