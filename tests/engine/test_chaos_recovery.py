"""The recovery tracker's decisions, from steps and events alone (no processes, no torch)."""

from __future__ import annotations

import math
import time
from typing import Any

from engine.chaos.kinds.corrupt_checkpoint import CorruptedTag
from engine.domain import Event, TelemetrySample
from engine.events import (
    ChaosApplied,
    ChaosInjected,
    ChaosRecovered,
    CheckpointFailed,
    CheckpointLoaded,
    CheckpointRejected,
    CheckpointSaved,
    Payload,
)
from engine.supervisor.chaos.recovery import Pending, RecoveryTracker

T0 = 1000.0  # s: the injection's time


def event(payload: Payload, seq: int = 1) -> Event:
    return Event(seq=seq, ts=time.time(), type=payload.event_type, data=payload.data())


def step(n: int, *, attempt: int = 1, loss: float = 1.0, overflow: bool = False) -> TelemetrySample:
    return TelemetrySample(
        step=n, ts=time.time(), attempt=attempt, samples=8 * n, tokens=1024 * n, loss=loss,
        lr=1e-3, step_time_s=0.1, tokens_per_s=1e4, overflow=overflow, micro_batch=8, grad_accum=1,
    )  # fmt: skip


def tracker(kind: str, params: dict[str, Any] | None = None, **extra: Any) -> RecoveryTracker:
    tracked = RecoveryTracker(timeout_s=60.0)
    tracked.injected(Pending("c1", kind, params or {}, T0, attempt=1, **extra))
    return tracked


def applied(kind: str, at: int, chaos_id: str = "c1") -> Event:
    return event(ChaosApplied(chaos_id=chaos_id, kind=kind, step=at))


def applied_by(kind: str, at: int, attempt: int) -> Event:
    return applied(kind, at).model_copy(update={"attempt": attempt})


def saved(n: int) -> Event:
    return event(CheckpointSaved(step=n, tag=f"global_step{n}", seconds=1, write_s=1, seal_s=0,
                                 background=False, size_bytes=10))  # fmt: skip


def test_a_kill_recovers_when_a_new_attempt_reports_a_step() -> None:
    tracked = tracker("kill")
    assert tracked.on_step(step(10, attempt=1), T0 + 1) == []
    [verdict] = tracked.on_step(step(5, attempt=2), T0 + 3)
    assert verdict.recovered and verdict.chaos_id == "c1" and verdict.step == 5 and verdict.seconds == 3
    assert not tracked.pending


def test_nan_loss_recovers_at_the_first_finite_step_after_the_burst() -> None:
    tracked = tracker("nan_loss", {"steps": 3})
    assert tracked.on_step(step(11, loss=math.nan), T0) == []  # not applied yet
    assert tracked.on_event(applied("nan_loss", 12), T0) == []
    for n in (12, 13, 14):
        assert tracked.on_step(step(n, loss=math.nan), T0) == []
    assert tracked.on_step(step(15, loss=math.nan), T0) == []  # still not finite
    [verdict] = tracked.on_step(step(16), T0 + 2)
    assert verdict.recovered and verdict.step == 16


def test_a_spike_recovers_at_the_first_finite_step_after_the_poisoned_one() -> None:
    tracked = tracker("spike", {"factor": 1000.0})
    assert tracked.on_event(applied("spike", 20), T0) == []
    assert tracked.on_step(step(21, loss=2000.0), T0) == []  # the poisoned step itself, finite
    [verdict] = tracked.on_step(step(22), T0 + 1)
    assert verdict.recovered and verdict.step == 22


def test_an_overflow_step_is_not_a_recovery() -> None:
    tracked = tracker("overflow", {"steps": 1})
    tracked.on_event(applied("overflow", 5), T0)
    assert tracked.on_step(step(6, overflow=True), T0) == []
    assert tracked.on_step(step(7), T0)[0].recovered


def test_oom_slow_steps_and_ballast_recover_by_steps() -> None:
    oom = tracker("oom")
    assert oom.on_step(step(3), T0) == []
    oom.on_event(applied("oom", 4), T0)
    assert oom.on_step(step(4), T0)[0].recovered
    slow = tracker("slow_steps", {"steps": 5})
    slow.on_event(applied("slow_steps", 10), T0)
    assert slow.on_step(step(14), T0) == []
    assert slow.on_step(step(15), T0)[0].recovered


def test_ballast_until_released_recovers_with_the_release() -> None:
    tracked = tracker("ballast", {"bytes": 1 << 20, "steps": 0})
    tracked.on_event(applied("ballast", 3), T0)
    assert tracked.on_step(step(1000), T0) == []
    tracked.injected(Pending("c2", "release", {}, T0 + 5, attempt=1))
    verdicts = tracked.on_event(applied("release", 1001, chaos_id="c2"), T0 + 6)
    assert sorted(v.chaos_id for v in verdicts) == ["c1", "c2"] and all(v.recovered for v in verdicts)


def test_disk_full_recovers_at_the_save_after_the_failed_ones() -> None:
    tracked = tracker("disk_full", {"saves": 2})
    tracked.on_event(applied("disk_full", 7), T0)
    failed = event(CheckpointFailed(step=10, tag="global_step10", reason="disk full"))
    tracked.on_event(failed, T0)
    assert tracked.on_event(saved(15), T0) == []  # one failure of two: not yet
    tracked.on_event(failed, T0)
    [verdict] = tracked.on_event(saved(20), T0)
    assert verdict.recovered and "2 saves failed" in verdict.detail


def test_a_corrupted_checkpoint_recovers_when_rejected_skipped_or_superseded() -> None:
    def corrupted() -> RecoveryTracker:
        return tracker("corrupt_checkpoint", kind_state=CorruptedTag("global_step20", 20))

    rejected = event(CheckpointRejected(tag="global_step20", problem="checksum mismatch"))
    assert corrupted().on_event(rejected, T0)[0].recovered
    other = event(CheckpointRejected(tag="global_step10", problem="checksum mismatch"))
    assert corrupted().on_event(other, T0) == []
    loaded = event(CheckpointLoaded(step=10, tag="global_step10", skipped=["global_step20: checksum"]))
    assert corrupted().on_event(loaded, T0)[0].recovered
    assert corrupted().on_event(saved(20), T0) == []
    assert corrupted().on_event(saved(30), T0)[0].recovered


def test_no_sign_of_recovery_by_the_deadline_is_a_failed_recovery() -> None:
    tracked = tracker("kill")
    assert tracked.expired(T0 + 59) == []
    [verdict] = tracked.expired(T0 + 60)
    assert not verdict.recovered and "60 s" in verdict.detail and not tracked.pending


def test_the_run_ending_settles_every_injection() -> None:
    preempted = tracker("preempt")
    preempted.on_event(saved(40), T0)
    [verdict] = preempted.settle("stopped", T0 + 4)
    assert verdict.recovered and verdict.step == 40
    unsaved = tracker("preempt")
    assert not unsaved.settle("stopped", T0)[0].recovered
    assert not tracker("nan_loss", {"steps": 3}).settle("completed", T0)[0].recovered


def test_a_verdict_the_supervisor_decides_itself() -> None:
    tracked = tracker("drop_consoles")
    [verdict] = tracked.resolve("c1", True, T0 + 0.5, "2 console connections closed")
    assert verdict.recovered and verdict.detail.startswith("2 console")
    assert tracked.resolve("c1", True, T0, "again") == []


def test_a_trainer_kind_lost_with_its_trainer_is_settled_by_the_next_attempt() -> None:
    tracked = tracker("slow_steps", {"steps": 5})
    assert tracked.on_step(step(9, attempt=1), T0) == []
    [verdict] = tracked.on_step(step(3, attempt=2), T0 + 8)
    assert verdict.recovered and verdict.detail.startswith("never applied")


def test_a_new_supervisor_takes_up_the_injections_left_without_a_verdict() -> None:
    def stored(seq: int, payload: Payload, attempt: int = 1) -> Event:
        return Event(seq=seq, ts=T0 + seq, type=payload.event_type, data=payload.data(), attempt=attempt)

    history = [
        stored(1, ChaosInjected(chaos_id="a", kind="nan_loss", params={"steps": 2})),
        stored(2, ChaosApplied(chaos_id="a", kind="nan_loss", step=5)),
        stored(3, ChaosRecovered(chaos_id="a", kind="nan_loss", recovered=True, seconds=1)),
        stored(4, ChaosInjected(chaos_id="b", kind="kill", pid=42)),
        stored(5, ChaosInjected(chaos_id="c", kind="corrupt_checkpoint", target="global_step20/model.pt")),
    ]
    tracked = RecoveryTracker(timeout_s=60.0)
    assert tracked.replay(history) == []
    assert sorted(tracked.pending) == ["b", "c"] and tracked.pending["c"].own(CorruptedTag).step == 20
    [killed] = tracked.on_step(step(21, attempt=2), T0 + 10)
    assert killed.chaos_id == "b" and killed.recovered and killed.seconds == 6
    [caught] = tracked.on_event(saved(25), T0 + 11)
    assert caught.chaos_id == "c" and caught.recovered


def test_a_verdict_stored_after_the_event_that_showed_it_is_not_recorded_again() -> None:
    """A disk_full's verdict is stored right after the save that showed it, a release's
    right after its chaos_applied: the replay reaches each signal first, then the verdict."""

    def stored(seq: int, payload: Payload) -> Event:
        return Event(seq=seq, ts=T0 + seq, type=payload.event_type, data=payload.data(), attempt=1)

    full = saved(1000)
    history = [
        stored(1, ChaosInjected(chaos_id="d", kind="disk_full", params={"saves": 1})),
        stored(2, ChaosApplied(chaos_id="d", kind="disk_full", step=34)),
        stored(3, CheckpointFailed(step=500, tag="global_step500", reason="no space left on device")),
        Event(seq=4, ts=T0 + 4, type=full.type, data=full.data, attempt=1),
        stored(5, ChaosRecovered(chaos_id="d", kind="disk_full", recovered=True, seconds=4)),
        stored(6, ChaosInjected(chaos_id="r", kind="release")),
        stored(7, ChaosApplied(chaos_id="r", kind="release", step=1236)),
        stored(8, ChaosRecovered(chaos_id="r", kind="release", recovered=True, seconds=0)),
        stored(9, ChaosInjected(chaos_id="s", kind="release")),
        stored(10, ChaosApplied(chaos_id="s", kind="release", step=1300)),
    ]
    tracked = RecoveryTracker(timeout_s=60.0)
    [unrecorded] = tracked.replay(history)  # only the release whose verdict the dead one never stored
    assert unrecorded.chaos_id == "s" and unrecorded.recovered
    assert tracked.pending == {}


def test_a_trainer_held_injection_ends_with_the_attempt_that_held_it() -> None:
    """A whole-tree kill (or a kill) between a disk_full's application and its failing save:
    the new trainer never fails a save, so waiting for one would time out."""
    tracked = tracker("disk_full", {"saves": 1})
    tracked.on_event(applied_by("disk_full", 34, attempt=1), T0)
    assert tracked.on_step(step(40, attempt=1), T0 + 1) == []
    [verdict] = tracked.on_step(step(1, attempt=2), T0 + 9)
    assert verdict.recovered and verdict.detail.startswith("attempt 1, which held it, ended")
    ballast = tracker("ballast", {"bytes": 1 << 20, "steps": 0})  # held until a release
    ballast.on_event(applied_by("ballast", 5, attempt=1), T0)
    assert ballast.on_step(step(500, attempt=1), T0 + 1) == []
    assert ballast.on_step(step(3, attempt=2), T0 + 2)[0].recovered


def test_an_oom_verdict_names_the_step_redone() -> None:
    oom = tracker("oom")
    oom.on_event(applied("oom", 499), T0)  # the boundary before step 500 (0-based index 499)
    [verdict] = oom.on_step(step(500), T0)
    assert verdict.recovered and verdict.detail == "step 500 trained, redone after its OOM"
