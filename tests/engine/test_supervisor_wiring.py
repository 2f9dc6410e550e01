"""The supervisor's wiring, without a trainer or a socket: the parts ``_wire`` builds from the
config, one step through the step consumers in their stated order, and one recorded event
through every journal watcher once (the reactions to the trainer's events among them)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from engine.alerts.watch import AlertWatch
from engine.config.config_file import build_run_config
from engine.directives.planners.factory import RulePlanning
from engine.directives.queue import DirectiveQueue
from engine.domain import Event
from engine.events import MemoryAdapted, StateChanged, TrainerStarted
from engine.run.directory import RunDir
from engine.supervisor.chaos.desk import ChaosDesk
from engine.supervisor.daemon import Supervisor
from engine.supervisor.hangs.hang_recovery import HangRecovery
from engine.supervisor.intake.run_progress import RunProgress
from engine.supervisor.intake.trainer_reports import TrainerReports
from engine.supervisor.trainers.rollback_restart import RollbackDesk
from engine.wire.protocol import TrainerEvent
from tests.engine.planner_samples import sample

STEP_CONSUMERS = [
    ("hang watch", HangRecovery, "on_step"),
    ("run progress", RunProgress, "on_step"),
    ("alert rules", AlertWatch, "on_step"),
    ("directives", DirectiveQueue, "on_step"),
    ("planner", RulePlanning, "on_step"),
    ("chaos desk", ChaosDesk, "on_step"),
]
"""Every part that hears of a step, in the order the wiring promises."""

WATCHERS = [
    ("rollback desk", RollbackDesk, "_on_event"),
    ("hang watch", HangRecovery, "_watch"),
    ("chaos desk", ChaosDesk, "_on_event"),
    ("run progress", RunProgress, "_watch"),
    ("trainer reports", TrainerReports, "_react"),
]
"""Every journal watcher of a one-host run (its reactions to the trainer's events last)."""

Heard = list[tuple[str, Any]]


def spy_on(monkeypatch: pytest.MonkeyPatch, parts: list[tuple[str, type, str]], heard: Heard) -> None:
    """Each part's method notes (its name, what it was given), then does what it does."""
    for name, cls, method in parts:
        real = getattr(cls, method)

        def spy(self: Any, arg: Any, *rest: Any, _name: str = name, _real: Callable[..., Any] = real) -> Any:
            heard.append((_name, arg))
            return _real(self, arg, *rest)

        monkeypatch.setattr(cls, method, spy)


@pytest.fixture
async def wired(home: Any) -> AsyncIterator[Supervisor]:
    """A supervisor of a one-host run with the rule planner, its parts wired, nothing started."""
    run = RunDir.create(build_run_config({"policy": {"planner": "rules"}}), home=home)
    supervisor = Supervisor(run, ["true"])
    supervisor._claim()
    await supervisor._open()
    yield supervisor
    await supervisor._close()


async def test_a_step_reaches_its_consumers_in_the_stated_order(
    wired: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: Heard = []
    spy_on(monkeypatch, STEP_CONSUMERS, heard)
    wired._wire(wired.run.read_config(), wired.store.read_meta())
    step = sample(1)
    wired.reports.on_step(step)
    assert heard == [(name, step) for name, _, _ in STEP_CONSUMERS]
    assert wired.latest == step and wired.state == "running"  # the run's progress took it


async def test_a_recorded_event_reaches_every_watcher_once(
    wired: Supervisor, monkeypatch: pytest.MonkeyPatch
) -> None:
    heard: Heard = []
    spy_on(monkeypatch, WATCHERS, heard)
    wired._wire(wired.run.read_config(), wired.store.read_meta())

    oom = MemoryAdapted(
        kind="oom",
        reason="test",
        step=7,
        from_micro_batch=8,
        to_micro_batch=4,
        from_grad_accum=1,
        to_grad_accum=2,
    )
    recorded = wired.journal.record(oom, "an OOM, as the spool intake or the trainer records it")
    assert heard == [(name, recorded) for name, _, _ in WATCHERS]
    assert wired.directives is not None and wired.directives.ooms == {8: 7}  # a reaction, heard once

    heard.clear()
    started = TrainerStarted(
        attempt=1,
        pid=1,
        device="cpu",
        world_size=1,
        params=1,
        precision="fp32",
        zero_stage=0,
        micro_batch=8,
        grad_accum=1,
    )
    message = TrainerEvent(type=started.event_type, message="started", data=started.data())
    wired.reports.on_event(message, started)  # the trainer's report, as the connection hands it
    by_seq: dict[int, Event] = {event.seq: event for _, event in heard}
    assert [e.type for e in by_seq.values()] == [TrainerStarted.event_type, StateChanged.event_type]
    for seq in by_seq:  # the state_changed that a reaction recorded, too
        assert [name for name, seen in heard if seen.seq == seq] == [name for name, _, _ in WATCHERS]
    assert wired.state == "running"
