"""A stored run with a restart, an eval and one event of every kind the reports mark, each at
a wall time the test knows (the store stamps events with the clock: set here afterwards)."""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path

from engine.config.config_file import build_run_config
from engine.events import (
    ChaosInjected,
    CheckpointSaved,
    DirectiveApplied,
    EvalCompleted,
    MemoryAdapted,
    RolledBack,
    RunStarted,
    TrainerRestarted,
)
from engine.events.payload import Payload
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from tests.fakes.run_script import make_sample

T0 = 1_790_000_000.0
"""Unix seconds of step 0."""


@dataclass(frozen=True)
class StoredRun:
    run: RunDir
    marked: dict[int, str]
    """seq -> event type, of the events a report marks."""


def _adapted(kind: str, step: int) -> MemoryAdapted:
    return MemoryAdapted(
        kind=kind, reason=kind, step=step, from_micro_batch=8, to_micro_batch=4, from_grad_accum=1,
        to_grad_accum=2,
    )  # fmt: skip


EVENTS: list[tuple[float, Payload, str, bool]] = [
    (0.5, RunStarted(supervisor_pid=1, run_dir="/r"), "run started", False),
    (20.5, ChaosInjected(chaos_id="c1", kind="kill", source="schedule", step=20), "chaos kill", True),
    (25.5, _adapted("oom", 25), "OOM: micro-batch 8 -> 4", True),
    (26.5, _adapted("shrink", 26), "shrink", False),
    (
        30.5,
        CheckpointSaved(
            step=30, tag="global_step30", seconds=0.1, write_s=0.1, seal_s=0.0, background=False, size_bytes=1
        ),
        "saved",
        False,
    ),
    (
        40.5,
        TrainerRestarted(
            cause="killed", returncode=-9, last_step=40, delay_s=1.0, restarts=1, streak=1, next_attempt=2
        ),
        "trainer restarted",
        True,
    ),  # fmt: skip
    (46.0, DirectiveApplied(step=31, applied={"lr_multiplier": 0.5}, resend=True), "re-sent", False),
    (48.5, RunStarted(supervisor_pid=2, run_dir="/r", previous_state="running"), "run resumed", True),
    (50.5, EvalCompleted(step=35, loss=3.0, batches=4, seconds=0.5, metrics={"acc": 0.4}), "eval", False),
    (55.5, DirectiveApplied(step=41, applied={"lr_multiplier": 0.5}), "lr x0.5", True),
    (
        70.5,
        RolledBack(
            directive_id="d1",
            tag="global_step30",
            tag_step=30,
            from_step=60,
            steps_given_up=30,
            skip_batches=30,
        ),
        "rolled back to global_step30",
        True,
    ),  # fmt: skip
]
"""(seconds after T0, payload, message, marked by the report)."""


def stored_run(home: Path) -> StoredRun:
    """Attempt 1: steps 1..40 at T0 + step s; attempt 2 replays from 31 (steps 31..60 at
    T0 + 45 + (step - 31) s, a lower loss); EVENTS between them."""
    run = RunDir.create(build_run_config(name="shown", steps=100), home)
    samples = [make_sample(s, ts=T0 + s, metrics={"acc": s / 100}, mem_budget=2**30) for s in range(1, 41)]
    samples += [
        make_sample(s, ts=T0 + 45 + s - 31, attempt=2, loss=4.0 - s / 100, mem_budget=2**30)
        for s in range(31, 61)
    ]
    marked: dict[int, str] = {}
    with Store(run.store) as store:
        for sample in samples:
            store.add_step(sample)
        stamps = []
        for offset, payload, message, marks in EVENTS:
            severity = "warning" if marks else "info"
            data = payload.data()
            event = store.append_event(payload.event_type, message=message, data=data, severity=severity)
            stamps.append((T0 + offset, event.seq))
            if marks:
                marked[event.seq] = event.type
        store.update_meta(state="stopped", attempt=2)
    with sqlite3.connect(run.store) as db:
        db.executemany("UPDATE events SET ts = ? WHERE seq = ?", stamps)
    return StoredRun(run, marked)
