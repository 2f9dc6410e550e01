"""What a trainer spooled while no supervisor heard it, taken in by the next one: only
what the store lacks, refused as the socket refuses, in order, the spool removed after."""

from __future__ import annotations

from engine.domain import TelemetrySample
from engine.events import CheckpointSaved, DirectiveApplied, Payload, RunStarted, TrainerFinished
from engine.run.directory import RunDir
from engine.run.report_spool import spool_path, spools
from engine.run.storage.store import Store
from engine.supervisor.intake.spool_intake import take_in
from engine.wire.protocol import StepReport, TrainerEvent, encode
from tests.fakes.fake_trainer import sample as fake_sample


def sample(step: int, attempt: int = 2) -> TelemetrySample:
    return fake_sample(step, attempt, None)


def trainer_event(payload: Payload, message: str = "") -> TrainerEvent:
    return TrainerEvent(
        type=payload.event_type, message=message, severity=payload.severity, data=payload.data()
    )


def write_spool(run: RunDir, attempt: int, lines: list[bytes]) -> None:
    path = spool_path(run, attempt)
    path.parent.mkdir(exist_ok=True)
    path.write_bytes(b"".join(lines))


def test_only_what_the_store_lacks_is_stored_and_the_spool_goes(run: RunDir) -> None:
    done = {"seconds": 0.1, "write_s": 0.1, "seal_s": 0.0, "background": False, "size_bytes": 10}
    saved = trainer_event(CheckpointSaved(step=5, tag="global_step5", **done), "saved")
    with Store(run.store) as store:
        for step in (1, 2, 3):
            store.add_step(sample(step))
        store.append_event("checkpoint_saved", message="saved", data=saved.data, attempt=2)  # heard once
        store.flush()
    lines = [encode(StepReport(sample=sample(s))) for s in (2, 3, 4, 5)]  # 2, 3: stored already
    lines += [encode(saved), encode(trainer_event(TrainerFinished(reason="stopped", step=5), "stopped"))]
    lines.append(b"not json\n")  # refused, the rest goes on
    forged = trainer_event(RunStarted(supervisor_pid=1, run_dir="/x"))
    lines.append(encode(forged))  # the supervisor's own type: refused
    lines.append(b'{"kind": "step", "sample": {"step": 6')  # cut short by a crash: left out
    write_spool(run, 2, lines)

    with Store(run.store) as store:
        intake = take_in(run, store)
        steps = [(s.attempt, s.step) for s in store.steps()]
        events = [e.type for e in store.events_since(0)]
    assert (intake.steps, intake.events, intake.refused, intake.attempts) == (2, 1, 2, [2])
    assert steps == [(2, 1), (2, 2), (2, 3), (2, 4), (2, 5)]
    assert events == ["checkpoint_saved", "trainer_finished"]
    assert not spools(run)


def test_a_directive_echo_the_queue_recorded_is_not_stored_again(run: RunDir) -> None:
    echo = DirectiveApplied(directive_id="d1", decision_id="v1", step=4, applied={"lr_multiplier": 0.5})
    with Store(run.store) as store:
        recorded = echo.model_copy(update={"directive": None})
        store.append_event("directive_applied", data=recorded.data(), attempt=1)
    resend = DirectiveApplied(directive_id=None, applied={"lr_multiplier": 0.5})
    fresh = DirectiveApplied(directive_id="d2", decision_id="v2", step=9, applied={"lr_multiplier": 0.7})
    write_spool(run, 1, [encode(trainer_event(p)) for p in (echo, resend, fresh)])
    with Store(run.store) as store:
        take_in(run, store)
        ids = [e.data.get("directive_id") for e in store.events_since(0)]
    assert ids == ["d1", "d2"]


def test_spools_are_taken_in_attempt_order(run: RunDir) -> None:
    write_spool(run, 10, [encode(StepReport(sample=sample(7, attempt=10)))])
    write_spool(run, 9, [encode(StepReport(sample=sample(6, attempt=9)))])
    with Store(run.store) as store:
        intake = take_in(run, store)
        steps = [s.step for s in store.steps()]
    assert intake.attempts == [9, 10] and steps == [6, 7]
