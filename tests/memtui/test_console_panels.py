"""The memory panel, the header's restart note and the checkpoints screen (renderers and Pilot)."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

from engine.events import (
    CheckpointSaved,
    MemoryAdapted,
    PlannedMemory,
    TrainerRestarted,
    TrainerResumed,
    TrainerStarted,
)
from engine.run.directory import RunDir
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.screens.checkpoints_screen import (
    CheckpointsScreen,
    render_checkpoint_list,
    render_last_save,
)
from memtui.console.widgets.memory_breakdown import render_breakdown
from memtui.console.widgets.memory_panel import render_adaptation, render_memory
from memtui.console.widgets.run_header import render_header
from memtui.console.widgets.throughput_panel import render_throughput
from memtui.formatting import PLACEHOLDER, format_bytes
from tests.fakes.run_script import make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, welcome_for
from tests.waiting import until

MIB = 2**20


def plain(markup: str) -> str:
    return Content.from_markup(markup).plain


def test_memory_shows_predicted_beside_measured_budget_and_geometry() -> None:
    sample = make_sample(
        5,
        mem_kind="cuda",
        mem_step_peak=1200 * MIB,
        mem_predicted=1000 * MIB,
        mem_budget=1800 * MIB,
        micro_batch=4,
        grad_accum=2,
    )
    adapted = make_event(
        3,
        MemoryAdapted(
            from_micro_batch=8,
            to_micro_batch=4,
            from_grad_accum=1,
            to_grad_accum=2,
            step=3,
            kind="shrink",
            reason="over budget",
        ),
    )
    view = RunView().with_sample(sample).with_event(adapted)
    text = plain(render_memory(view, 100))
    assert f"step peak {format_bytes(1200 * MIB)}" in text
    assert "predicted" in text and "(+20%)" in text
    assert "budget" in text and "4 × 2 accum" in text
    assert "8→4 at step 3 (shrink: over budget)" in text
    assert render_adaptation(adapted) == "8→4 at step 3 (shrink: over budget)"


def test_memory_without_a_prediction_shows_placeholders() -> None:
    text = plain(render_memory(RunView().with_sample(make_sample(1)), 80))
    assert f"step peak {PLACEHOLDER}" in text and f"predicted {PLACEHOLDER}" in text
    assert "8 × 1 accum" in text and "adapted" not in text


def test_header_shows_a_restart_in_progress_then_the_count() -> None:
    restarted = TrainerRestarted(
        cause="killed by SIGKILL",
        returncode=-9,
        last_step=52,
        candidate_step=40,
        delay_s=1.0,
        restarts=2,
        streak=1,
        next_attempt=3,
    )
    event = make_event(7, restarted, attempt=2)
    restarting = plain(render_header(RunView(run_id="r", state="restarting").with_event(event), 0.0))
    assert "restarting (killed by SIGKILL; checkpoint step 40 if it verifies)" in restarting
    view = RunView(run_id="r", state="running").with_event(event)
    assert plain(render_header(view, 0.0)).split("↻ ")[1].startswith("2 restarts  ")  # cost not known yet
    # the trainer rejected step 40 (corrupt) and loaded 20: the header says what it cost
    resumed = TrainerResumed(attempt=3, resume_step=20, last_step=52, steps_lost=32, candidate_step=40)
    view = view.with_event(make_event(8, resumed, attempt=3))
    assert "↻ 2 restarts, resumed at step 20, 32 steps lost" in plain(render_header(view, 0.0))


def test_checkpoint_list_marks_states_and_latest() -> None:
    rows = [
        {
            "tag": "global_step20",
            "step": 20,
            "state": "verified",
            "problem": None,
            "size_bytes": 4 * MIB,
            "age_s": 5.0,
            "latest": True,
        },
        {
            "tag": "global_step10",
            "step": 10,
            "state": "corrupt",
            "problem": "sha256 mismatch",
            "size_bytes": MIB,
            "age_s": 65.0,
            "latest": False,
        },
    ]
    text = plain(render_checkpoint_list(rows, "full"))
    assert "global_step20" in text and "verified" in text and "latest" in text
    assert "corrupt: sha256 mismatch" in text and "verifying" not in text
    assert "verifying checksums" in plain(render_checkpoint_list(rows, "quick"))
    assert "no checkpoints yet" in plain(render_checkpoint_list([], "full"))


async def test_checkpoints_screen_lists_and_rereads_on_checkpoint_events(live_run: RunDir) -> None:
    (live_run.checkpoints / "global_step10").mkdir(parents=True)
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id)) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("C")
            screen = app.screen
            assert isinstance(screen, CheckpointsScreen)
            await until(lambda: screen.check == "full")
            listing = str(screen.query_one("#checkpoint-list", Static).visual)
            assert "global_step10" in listing and "global_step20" not in listing
            (live_run.checkpoints / "global_step20.staging").mkdir()
            fake.add_event(saved(20, seconds=0.004, write_s=0.004, seal_s=0.012), "checkpoint step 20")
            await until(lambda: "global_step20" in str(screen.query_one("#checkpoint-list", Static).visual))
            await until(lambda: "waited 4 ms" in str(screen.query_one("#last-save", Static).visual))
            await pilot.press("escape")
            assert not isinstance(app.screen, CheckpointsScreen)
            assert any(c[2] == "checkpoints" for c in app.palette_commands())


def saved(
    step: int, *, seconds: float, write_s: float, seal_s: float, background: bool = True
) -> CheckpointSaved:
    return CheckpointSaved(
        step=step,
        tag=f"global_step{step}",
        seconds=seconds,
        write_s=write_s,
        seal_s=seal_s,
        background=background,
        size_bytes=1 << 20,
    )


def test_last_save_line_says_what_training_waited_and_where_it_was_sealed() -> None:
    assert "no save" in plain(render_last_save(None))
    background = make_event(4, saved(40, seconds=0.0054, write_s=0.0054, seal_s=0.121))
    text = plain(render_last_save(background))
    assert "step 40" in text and "waited 5 ms" in text and "sealed in the background in 121 ms" in text
    in_line = make_event(5, saved(50, seconds=0.2, write_s=0.05, seal_s=0.15, background=False))
    assert "waited 200 ms" in plain(render_last_save(in_line)) and "sealed in line" in plain(
        render_last_save(in_line)
    )
    failed = make_event(
        6, "checkpoint_failed", "checkpoint global_step60 failed: disk full", data={"step": 60}
    )
    assert "step 60" in plain(render_last_save(failed)) and "disk full" in plain(render_last_save(failed))
    assert RunView().with_event(failed).last_save == failed
    assert RunView().with_event(failed).with_event(make_event(7, "note")).last_save == failed


def test_compact_memory_keeps_the_geometry_on_the_prediction_line() -> None:
    text = plain(render_memory(RunView().with_sample(make_sample(1, micro_batch=4, grad_accum=2)), 40, 6))
    assert len(text.splitlines()) == 6 and text.splitlines()[-1].endswith("batch 4×2")


def _started(**fields: object) -> TrainerStarted:
    base: dict[str, object] = dict(
        attempt=1,
        pid=1,
        device="cpu",
        world_size=1,
        params=1,
        precision="fp16",
        zero_stage=0,
        micro_batch=8,
        grad_accum=1,
    )
    return TrainerStarted(**{**base, **fields})  # type: ignore[arg-type]


def test_throughput_shows_mfu_and_where_the_peak_came_from() -> None:
    sample = make_sample(5, mfu=0.0123, model_tflops=0.01)
    view = RunView().with_sample(sample).with_event(make_event(1, _started(peak_source="measured")))
    assert "MFU 1.2% (measured peak)" in plain(render_throughput(view))
    assert "MFU" not in plain(render_throughput(RunView().with_sample(make_sample(5))))


def test_mfu_above_the_peak_is_flagged_never_shown_over_100_percent() -> None:
    started = make_event(1, _started(peak_source="measured", peak_tflops=0.01))
    beat = RunView().with_sample(make_sample(5, mfu=None, model_tflops=0.012)).with_event(started)
    assert "MFU > peak (probe unreliable)" in plain(render_throughput(beat))
    old = RunView().with_sample(make_sample(5, mfu=1.218, model_tflops=0.012)).with_event(started)
    text = plain(render_throughput(old))  # an older trainer sent the ratio as it was
    assert "MFU > peak (probe unreliable)" in text and "121.8%" not in text
    configured = make_event(1, _started(peak_source="config", peak_tflops=0.01))
    wrong = RunView().with_sample(make_sample(5, mfu=None, model_tflops=0.012)).with_event(configured)
    assert "MFU > peak (config peak too low)" in plain(render_throughput(wrong))


def test_memory_breakdown_beside_the_measured_peak_and_the_plan() -> None:
    planned = PlannedMemory(
        params=2 * MIB,
        grads=2 * MIB,
        optimizer=16 * MIB,
        activations_per_sample=MIB,
        margin=400 * MIB,
        micro_batch=8,
        planned_peak=430 * MIB,
    )
    sample = make_sample(5, mem_step_peak=500 * MIB, micro_batch=4, grad_accum=2)
    view = RunView().with_sample(sample).with_event(make_event(1, _started(planned_memory=planned)))
    line = plain(render_breakdown(view, 120) or "")
    assert f"params {format_bytes(2 * MIB)}" in line and f"optim {format_bytes(16 * MIB)}" in line
    assert f"act {format_bytes(4 * MIB)}" in line  # per sample x the current micro-batch
    assert f"other {format_bytes(476 * MIB)}" in line and f"plan {format_bytes(430 * MIB)} at 8" in line
    assert f"plan {format_bytes(430 * MIB)}" in plain(render_memory(view, 120, 12))
    assert "plan" not in plain(render_memory(view, 120, 7))  # no room: the chart keeps its lines
    assert render_breakdown(RunView().with_sample(sample), 120) is None  # no plan: no line
    pressed = sample.model_copy(update={"step": 6, "mem_step_peak": 756 * MIB, "mem_ballast": 256 * MIB})
    line = plain(render_breakdown(view.with_sample(pressed), 160) or "")
    assert f"ballast {format_bytes(256 * MIB)}" in line and f"other {format_bytes(476 * MIB)}" in line
