"""End to end: a loss spike rolled back on a real run (supervisor + DeepSpeed trainer on the CPU).

A ``spike`` is injected with ``memtui chaos``; the rule planner proposes a rollback with its
evidence (the robust z-score, the window, the tag); the operator approves it in a Pilot
console; the supervisor restarts the trainer from the tag with the data cursor moved past
the spike (``rolled_back``, then ``trainer_resumed`` at the tag's step), the timeline and
``memtui report`` say so, and the loss over the next 100 steps stays within the band of
the steps before the spike (widened by its own width: batch-to-batch noise).
"""

from __future__ import annotations

import asyncio
import json
import statistics
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_harness import memtui, throwaway_home

from engine.events import ChaosApplied, RolledBack, TrainerResumed
from engine.run.directory import RunDir, list_runs
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.widgets.directives_panel import DirectivesPanel
from memtui.console.widgets.event_log import EventLog
from tests.memtui.console_harness import text_of
from tests.waiting import until

pytestmark = [pytest.mark.e2e, pytest.mark.deepspeed, pytest.mark.timeout(900)]

CONFIG = """
steps = 100000
[train]
micro_batch = 4
global_batch = 8
warmup_steps = 0
precision = "fp32"
[memory]
adaptive = false
[checkpoint]
every_steps = 20
[policy]
planner = "rules"
approval = "manual"
micro_batch_size_max = 4  # no headroom suggestion: the rollback is the one pending directive
"""
BAND_STEPS = 30  # steps before the spike whose losses make the band
AFTER_STEPS = 100  # steps after the resume that must stay within it


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtr")


def losses(run: RunDir) -> list[tuple[int, float, int]]:
    """(step, loss, attempt) of every stored step, in the order stored."""
    with Store(run.store, readonly=True) as store:
        rows = store.query("SELECT step, loss, attempt FROM steps ORDER BY rowid")
    return [(int(s), float(loss), int(a)) for s, loss, a in rows]


def resumed_steps(run: RunDir, attempt: int, after: int) -> list[float]:
    return [loss for s, loss, a in losses(run) if a == attempt and s > after]


async def test_a_spike_is_rolled_back_with_the_operators_approval_in_the_console(home: Path) -> None:
    config = home / "run.toml"
    config.write_text(CONFIG)
    started = memtui(home, "run", str(config), "--detach")
    assert started.returncode == 0, started.stderr
    (run,) = list_runs(home)
    app = MemtuiApp(run)
    async with app.run_test(size=(160, 48)) as pilot:
        await until(lambda: app.view.step >= 45, timeout=300, what="45 steps", seen=lambda: app.view.step)
        injected = await asyncio.to_thread(memtui, home, "chaos", run.run_id, "spike", "--factor", "1000")
        assert injected.returncode == 0, injected.stderr
        applied = await until(
            lambda: next((c for e in app.view.events if (c := ChaosApplied.of(e)) is not None), None),
            timeout=60,
            what="the trainer to apply the spike",
        )
        proposal = await until(
            lambda: next((d for d in app.view.directives if d.rollback is not None), None),
            timeout=60,
            what="the rule planner's rollback",
            seen=lambda: app.view.directives,
        )
        assert proposal.source == "rules" and proposal.rollback is not None
        spike_step = applied.step + 1  # telemetry numbers the poisoned step after it ran
        tag_step = proposal.rollback.tag_step
        assert tag_step < spike_step and proposal.rollback.skip_batches == spike_step - tag_step
        evidence = "\n".join(proposal.evidence)
        assert "robust z" in evidence and "-step window" in evidence and proposal.rollback.tag in evidence

        panel = app.query_one(DirectivesPanel)  # redrawn after the view: "a" answers its cursor
        await until(
            lambda: (d := panel.current()) is not None and d.id == proposal.id,
            what="the rollback under the directives panel's cursor",
            seen=panel.current,
        )
        await pilot.press("a")
        await until(lambda: isinstance(app.screen, ConfirmScreen), what="the confirmation")
        await pilot.press("y")
        done = await until(
            lambda: next((r for e in app.view.events if (r := RolledBack.of(e)) is not None), None),
            timeout=180,
            what="rolled_back from the supervisor",
            seen=lambda: [(d.id, d.state, d.reasons[-2:]) for d in app.view.directives],
        )
        assert done.tag == proposal.rollback.tag and done.skip_batches == proposal.rollback.skip_batches
        assert done.steps_given_up == done.from_step - tag_step > 0
        resumed = await until(
            lambda: next((r for e in app.view.events if (r := TrainerResumed.of(e)) is not None), None),
            timeout=120,
            what="the new attempt to resume",
        )
        assert resumed.resume_step == tag_step
        skipped = f"resumed from {done.tag} after a rollback: {done.skip_batches} steps of data skipped"
        assert skipped in run.trainer_log(resumed.attempt).read_text()  # the real trainer's cursor
        await until(
            lambda: "rolled back to " + done.tag in text_of(app.query_one(EventLog)),
            what="the rollback on the timeline",
        )
        await until(
            lambda: len(resumed_steps(run, resumed.attempt, tag_step)) >= AFTER_STEPS,
            timeout=600,
            every_s=1.0,
            what=f"{AFTER_STEPS} steps after the resume",
        )

    stored = losses(run)
    before = [
        loss for s, loss, a in stored if a < resumed.attempt and spike_step - BAND_STEPS <= s < spike_step
    ]
    spiked = max(loss for s, loss, a in stored if a < resumed.attempt and s == spike_step)
    after = resumed_steps(run, resumed.attempt, tag_step)[:AFTER_STEPS]
    high = max(before)
    assert spiked > 10 * high  # the spike was real
    # Back within the pre-spike band. One batch's loss against another's differs by 0.3 or more
    # at this size, and 100 draws reach past the highest of 30 from the same spread (a CI run
    # saw 2.924 after against 2.916 before), so the band is widened by its own width.
    width = high - min(before)
    assert max(after) <= high + width, (min(before), high, max(after))
    assert statistics.median(after) <= statistics.quantiles(before, n=4)[2]  # the band's upper quartile

    report = memtui(home, "report", run.run_id, "--json")
    assert report.returncode == 0, report.stderr
    [rollback] = json.loads(report.stdout)["rollbacks"]
    assert rollback["tag"] == done.tag and rollback["steps_given_up"] == done.steps_given_up
    memtui(home, "stop", run.run_id)
