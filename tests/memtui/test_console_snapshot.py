"""The main screen, cell for cell, against the scripted transport with fixed data and a fixed
clock: 80x24 (compact) and 160x48 (wide), in the dark and in the ANSI theme, with two workload
metrics in their panel; the "terminal too
small" screen below the minimum; a two-rank run's memory panel (compact, and maximised with
a row per rank); and the alert list.

Update after an intended change: ``pytest tests/memtui/test_console_snapshot.py --snapshot-update``.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from tests.fakes.run_script import make_directive, make_event, make_ranks, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.waiting import until

CREATED_AT = 1_700_000_000.0
NOW = CREATED_AT + 754.0  # 12m34s into the run
LAST_STEP = 240


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def sample(step: int):  # type: ignore[no-untyped-def]
    return make_sample(
        step,
        ts=NOW - 0.4 - (LAST_STEP - step) * 0.5,
        loss=2.3456 + (LAST_STEP - step) * 0.01,
        grad_norm=0.734,
        loss_scale=2048.0 if step > 200 else 4096.0,
        overflow=step == 201,
        overflow_count=2 if step > 200 else 1,
        skipped_steps=2 if step > 200 else 1,
        tokens_per_s=20_000.0 + 2_000.0 * math.sin(step / 9),
        mem_allocated=1536 * 2**20,
        mem_reserved=(1600 + (step % 50)) * 2**20,
        mem_peak=1900 * 2**20,
        metrics={
            "accuracy": round(0.9 - 0.6 * math.exp(-step / 80), 4),
            "perplexity": 10.4 + 30 * math.exp(-step / 60),
        },
    )


def ranked_sample(step: int):  # type: ignore[no-untyped-def]
    """``sample(step)`` of a two-rank CUDA run; every fourth step carries the rank report."""
    s = sample(step).model_copy(update={"mem_kind": "cuda", "world_size": 2})
    return s.model_copy(update={"ranks": make_ranks(s, 2) if step % 4 == 0 else None})


def fixed_run(home: Path, make=sample) -> RunDir:  # type: ignore[no-untyped-def]
    run = RunDir(home / "runs" / "demo-20231114-221320-ab12")
    run.ensure_layout()
    config = build_run_config(name="demo", steps=2000).model_dump(mode="json")
    doc = {"run_id": run.run_id, "created_at": CREATED_AT, "config": config}
    run.config_file.write_text(json.dumps(doc))
    with Store(run.store) as store:
        for step in range(1, LAST_STEP + 1):
            store.add_step(make(step))
    return run


def scripted_events() -> list:  # type: ignore[type-arg]
    directive = make_directive("d-7", created_at=NOW - 62, expires_at=NOW + 238, step=238)
    return [
        make_event(1, "run_started", "run started: preset tiny, 2000 steps"),
        make_event(2, "trainer_started", "trainer attempt 1 (pid 4242)"),
        make_event(3, "loss_scale_dropped", "fp16 overflow: loss scale 4096 -> 2048", severity="warning"),
        make_event(4, "checkpoint_saved", "checkpoint step 200 (12.1 MiB, verified)"),
        make_event(
            5,
            "directive_proposed",
            "directive d-7 from rules",
            data={"directive": directive.model_dump(mode="json")},
        ),
    ]


def console(run: RunDir, theme: str) -> MemtuiApp:
    view = dataclasses.replace(stored_view(run), connection="connecting", newest_data_at=None)
    return MemtuiApp(run, view=view, clock=lambda: NOW, theme_name=theme)


async def until_drawn(pilot, *, last_seq: int = 5, step: int = LAST_STEP + 1) -> None:  # type: ignore[no-untyped-def]
    app = pilot.app
    await until(
        lambda: (
            app.view.connection == "connected"
            and app.view.last_seq == last_seq
            and app.view.step == step
            and app.view.run_throughput is not None
        ),
        what="the console to catch up with the scripted engine and read the run's figures",
        seen=lambda: (app.view.connection, app.view.last_seq, app.view.step, app.view.run_throughput),
    )
    app.main.redraw()  # all the engine sent, the charts too (they otherwise follow at their slower rate)
    await pilot.pause()


async def figures_read(pilot) -> None:  # type: ignore[no-untyped-def]
    """The run-wide tokens/s read from the store (a worker thread, once a second) and drawn."""
    app = pilot.app
    await until(lambda: app.view.run_throughput is not None, what="the run-wide figures")
    app.main.redraw()
    await pilot.pause()


@pytest.mark.parametrize("theme", ["dark", "ansi"])
@pytest.mark.parametrize("size", [(80, 24), (160, 48)], ids=["80x24", "160x48"])
def test_main_screen(home: Path, utc: None, snap_compare, theme: str, size: tuple[int, int]) -> None:  # type: ignore[no-untyped-def]
    run = fixed_run(home)
    # The last sample again, live: the clock says it arrived just now.
    stream = telemetry([sample(LAST_STEP + 1)])
    with ScriptedEngine.in_thread(
        run.socket, welcome_for(run.run_id), events=scripted_events(), stream=stream
    ):
        assert snap_compare(console(run, theme), terminal_size=size, run_before=until_drawn)


def test_too_small_terminal(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]
    run = fixed_run(home)
    app = MemtuiApp(run, live=False, view=stored_view(run), clock=lambda: NOW)
    assert snap_compare(app, terminal_size=(60, 20))


@pytest.mark.parametrize("maximised", [False, True], ids=["compact", "maximised"])
def test_two_rank_memory_panel(home: Path, utc: None, snap_compare, maximised: bool) -> None:  # type: ignore[no-untyped-def]
    """80x24: the compact panel names the worst rank; maximised (z), a row per rank."""
    run = fixed_run(home, ranked_sample)
    app = MemtuiApp(run, live=False, view=stored_view(run), clock=lambda: NOW)
    assert app.view.ranks_step == LAST_STEP and len(app.view.ranks) == 2
    assert snap_compare(
        app, terminal_size=(80, 24), press=["z"] if maximised else [], run_before=figures_read
    )


def test_alert_list(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]
    """Key A over a run with firing, reminded and resolved alerts (fixed times and clock)."""
    from tests.memtui.test_alerts_screen import T0, history

    run = fixed_run(home)
    view = stored_view(run)
    for event in history():
        view = view.with_event(event)
    app = MemtuiApp(run, live=False, view=view, clock=lambda: T0 + 600)
    assert snap_compare(app, terminal_size=(120, 30), press=["A"], run_before=figures_read)


def test_chaos_form(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]
    """The memory-pressure form over the main screen: defaults, bounds and help per parameter,
    and a refused value naming its field."""
    from textual.widgets import Input

    from engine.chaos.table import chaos_specs
    from memtui.console.screens.chaos_form_screen import ChaosFormScreen

    run = fixed_run(home)
    app = MemtuiApp(run, live=False, view=stored_view(run), clock=lambda: NOW)
    (spec,) = chaos_specs(["ballast"])

    async def open_form(pilot) -> None:  # type: ignore[no-untyped-def]
        await figures_read(pilot)
        form = ChaosFormScreen(spec)
        await pilot.app.push_screen(form)
        form.query_one("#param-steps", Input).value = "-1"
        form.submit()

    assert snap_compare(app, terminal_size=(100, 30), run_before=open_form)
