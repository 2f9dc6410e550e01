"""What the run says of its checkpoints is what is on disk: a tag sealed just before its
trainer died gets its ``checkpoint_saved`` (reconciled) before the next launch."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from checkpoint_samples import FIELDS, writer

from engine.checkpoints.store import CheckpointStore
from engine.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.store import Store


def is_event(kind: str, attempt: int | None = None) -> Any:
    def match(message: Any) -> bool:
        return (
            message.kind == "event"
            and message.event.type == kind
            and (attempt is None or message.event.attempt == attempt)
        )

    return match


def seal(checkpoints: Path, step: int) -> None:
    """A tag sealed as the trainer's store does, with no event about it."""
    store = CheckpointStore(checkpoints)
    outcome = store.save(step, writer(checkpoints, step), dict(FIELDS, samples=step * 8), estimate_bytes=1000)
    assert outcome.status == "saved"


async def test_a_tag_sealed_before_a_sigkill_is_announced_at_the_restart(
    run: RunDir, start, connect, fake_env
) -> None:
    run.write_config(build_run_config(steps=100000, restart={"backoff_initial_s": 0.1}))
    running = await start()
    client = await connect(replay_from=0)
    launched, _ = await client.until(is_event("trainer_launched"))
    await client.until(is_event("trainer_started"))
    seal(run.checkpoints, 40)  # ... and the trainer is killed before it says checkpoint_saved
    os.kill(launched.event.data["pid"], signal.SIGKILL)
    await client.until(is_event("trainer_started", attempt=2))
    running.supervisor.request_stop("test over")
    assert await running.result() == 0
    with Store(run.store, readonly=True) as store:
        saved = [e for e in store.events_since(0) if e.type == "checkpoint_saved"]
    assert [(e.data["tag"], e.data["reconciled"], e.attempt) for e in saved] == [("global_step40", True, 1)]
    assert "never announced" in saved[0].message
