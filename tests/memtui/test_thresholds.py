"""The console colours by the run's thresholds: from the supervisor's Welcome, else from run.json,
else the config models' defaults; it defines no level of its own."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from textual.content import Content

from engine.config.config_file import build_run_config
from engine.config.run_config import RunConfig
from engine.domain import TelemetrySample, Thresholds
from engine.hardware_report import GpuReport, HardwareSnapshot
from engine.run.directory import RunDir
from engine.wire.protocol import Welcome
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.run_view import DEFAULT_THRESHOLDS, RunView
from memtui.console.widgets.hardware_panel import render_hardware
from memtui.console.widgets.memory_panel import MemoryPanel, render_memory
from memtui.formatting import format_bytes
from memtui.history import read_identity
from tests.fakes.run_script import make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.memtui.test_console import until

GIB = 2**30
WARN_AT_HALF = RunConfig.model_validate({"memory": {"warn": 0.5, "critical": 0.9}}).thresholds()


def sixty_percent(step: int = 1) -> TelemetrySample:
    """A step whose reserved memory is 60% of its capacity (allocated 30%, peak 62%)."""
    return make_sample(
        step,
        mem_capacity=10 * GIB,
        mem_allocated=3 * GIB,
        mem_reserved=6 * GIB,
        mem_peak=int(6.2 * GIB),
    )


def bar_style(markup: str, label: str) -> str:
    """The colour of the bar on the ``label`` line of the memory panel's markup."""
    line = next(line for line in markup.splitlines() if Content.from_markup(line).plain.startswith(label))
    return line.split("[/]", 1)[1].split("]", 1)[0].lstrip("[")


def test_default_thresholds_are_the_config_models_defaults() -> None:
    defaults = RunConfig()
    expected = Thresholds(
        memory_warn=defaults.memory.warn,
        memory_critical=defaults.memory.critical,
        loss_scale_floor=defaults.alerts.loss_scale_floor,
    )
    assert expected == DEFAULT_THRESHOLDS
    assert RunView().thresholds == DEFAULT_THRESHOLDS


@pytest.mark.parametrize(
    ("thresholds", "style"),
    [(WARN_AT_HALF, "$warning"), (None, "$success")],
    ids=["run-warns-at-half", "supervisor-sends-none"],
)
async def test_console_colours_memory_by_the_runs_thresholds(
    live_run: RunDir, thresholds: Thresholds | None, style: str
) -> None:
    samples = [sixty_percent(step) for step in range(1, 4)]
    welcome = welcome_for(live_run.run_id, thresholds=thresholds)
    async with ScriptedEngine(live_run.socket, welcome, stream=telemetry(samples)):
        app = MemtuiApp(live_run)
        async with app.run_test(size=(100, 30)):
            await until(lambda: app.view.step == 3 and app.view.connection == "connected")
            panel = app.query_one(MemoryPanel)
            await until(lambda: "reserved" in Content.from_markup(panel.text).plain)
            assert app.view.thresholds == (thresholds or DEFAULT_THRESHOLDS)
            assert bar_style(panel.text, "reserved") == style
            assert bar_style(panel.text, "allocated") == "$success"  # 30%: under either level


def test_memory_and_hardware_panels_colour_by_the_views_thresholds() -> None:
    levels = Thresholds(memory_warn=0.5, memory_critical=0.55, loss_scale_floor=1.0)
    view = RunView(thresholds=levels).with_sample(sixty_percent())
    assert bar_style(render_memory(view, 80), "reserved") == "$error"
    assert bar_style(render_memory(RunView().with_sample(sixty_percent()), 80), "reserved") == "$success"
    gpu = GpuReport(index=0, memory_used=6 * GIB, memory_total=10 * GIB)
    snapshot = HardwareSnapshot(ts=0.0, gpus=[gpu])
    used = format_bytes(6 * GIB)
    assert f"[$text-error]{used}[/]" in render_hardware(snapshot, thresholds=levels)
    assert f"[$text]{used}[/]" in render_hardware(snapshot)  # 60%: under the default levels


def test_memory_under_a_budget_is_coloured_by_its_share_of_the_room_as_the_controller_judges() -> None:
    """Budget 8 GiB of which 5 GiB is baseline (what no micro-batch changes): 6 GiB reserved
    is 75% of the budget but a third of the 3 GiB room, where the controller sees no
    pressure; 7.8 GiB is 93% of the room, critical for both."""
    budget, baseline = 8 * GIB, 5 * GIB
    levels = Thresholds(memory_warn=0.7, memory_critical=0.9, loss_scale_floor=1.0)

    def reserved_style(sample: TelemetrySample) -> str:
        return bar_style(render_memory(RunView(thresholds=levels).with_sample(sample), 80), "reserved")

    calm = sixty_percent().model_copy(update={"mem_budget": budget, "mem_baseline": baseline})
    assert reserved_style(calm) == "$success"
    assert reserved_style(calm.model_copy(update={"mem_baseline": None})) == "$warning"  # 75% of the budget
    assert reserved_style(calm.model_copy(update={"mem_reserved": int(7.8 * GIB)})) == "$error"


def test_loss_scale_floor_is_the_runs() -> None:
    sample = make_sample(1, loss_scale=64.0)
    assert RunView().with_sample(sample).numerics_alerts() == []
    floored = RunConfig.model_validate({"alerts": {"loss_scale_floor": 64.0}}).thresholds()
    assert RunView(thresholds=floored).with_sample(sample).numerics_alerts() == ["loss scale at its floor"]


def test_welcome_thresholds_replace_the_known_ones_and_none_keeps_them() -> None:
    view = RunView(thresholds=WARN_AT_HALF)
    assert view.with_welcome(Welcome(run_id="r", state="running", last_seq=0)).thresholds == WARN_AT_HALF
    floored = RunConfig.model_validate({"alerts": {"loss_scale_floor": 8.0}}).thresholds()
    welcome = Welcome(run_id="r", state="running", last_seq=0, thresholds=floored)
    assert view.with_welcome(welcome).thresholds == floored


def test_history_carries_run_json_thresholds(home: Path) -> None:
    config = build_run_config(
        {"memory": {"warn": 0.5, "critical": 0.6}, "alerts": {"loss_scale_floor": 8.0}}, name="levels"
    )
    run = RunDir.create(config, home)
    expected = Thresholds(memory_warn=0.5, memory_critical=0.6, loss_scale_floor=8.0)
    assert read_identity(run).thresholds == expected
    assert stored_view(run).thresholds == expected


def test_history_without_a_valid_config_uses_the_defaults(run_dir: RunDir) -> None:
    doc = json.loads(run_dir.config_file.read_text())
    doc["config"]["memory"]["warn"] = "high"  # not a number: the config does not validate
    run_dir.config_file.write_text(json.dumps(doc))
    identity = read_identity(run_dir)
    assert identity.thresholds is None and identity.target_steps == 100  # identity still read
    assert stored_view(run_dir).thresholds == DEFAULT_THRESHOLDS
    run_dir.config_file.unlink()
    assert stored_view(run_dir).thresholds == DEFAULT_THRESHOLDS
