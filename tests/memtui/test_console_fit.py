"""At 80x24, the smallest size we promise, every panel shown is whole: its box on screen and
its lines inside it (Hardware shown too, the Numerics eval line and an alert), and the alert
list wraps a message at a word rather than cut it."""

from __future__ import annotations

from pathlib import Path

from engine.events import EvalCompleted
from engine.hardware_report import GpuReport, HardwareSnapshot, HostReport
from engine.run.storage.store import Store
from memtui.console.app import MemtuiApp
from memtui.console.history_view import stored_view
from memtui.console.screens.alerts_screen import alert_episodes, render_alert_list
from memtui.console.widgets.hardware_panel import HardwarePanel, render_hardware
from memtui.console.widgets.numerics_panel import NumericsPanel
from memtui.console.widgets.panel import Panel
from tests.memtui.console_harness import text_of
from tests.memtui.test_alerts_screen import T0, history, plain
from tests.memtui.test_console_snapshot import NOW, fixed_run, scripted_events
from tests.waiting import until

SMALL = (80, 24)


def cut_panels(app: MemtuiApp) -> list[str]:
    """Each shown panel whose box leaves the screen above the footer or whose lines do not fit."""
    bottom = app.screen.region.height - 1  # the footer's row
    cut = []
    for panel in app.query(Panel):
        if not panel.display:
            continue
        lines = len(text_of(panel.body).splitlines())
        if panel.region.bottom > bottom or panel.content_size.height < max(1, lines):
            cut.append(f"{panel.id}: {panel.region} for {lines} lines")
    return cut


async def test_every_panel_is_whole_with_hardware_shown(home: Path) -> None:
    run = fixed_run(home)
    view = stored_view(run)
    for event in scripted_events():
        view = view.with_event(event)
    app = MemtuiApp(run, live=False, view=view, clock=lambda: NOW)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("6")
        await until(lambda: app.query_one(HardwarePanel).region.height > 2, what="hardware shown")
        app.main.redraw()
        await pilot.pause()
        assert cut_panels(app) == []
        assert app.query_one("#events").region.height >= 4  # a few events, not a border


async def test_the_numerics_eval_line_keeps_every_row_on_screen(home: Path) -> None:
    run = fixed_run(home)
    with Store(run.store) as store:
        done = EvalCompleted(step=210, loss=2.9, batches=8, seconds=0.4, metrics={})
        store.append_event(done.event_type, data=done.data(), attempt=1, message="eval at step 210")
    app = MemtuiApp(run, live=False, view=stored_view(run), clock=lambda: NOW)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.pause()
        app.main.redraw()
        await pilot.pause()
        numerics = text_of(app.query_one(NumericsPanel).body)
        assert "eval" in numerics and "overflows" in numerics
        assert cut_panels(app) == []


def test_the_alert_list_wraps_a_message_at_a_word_within_its_width() -> None:
    text = plain(render_alert_list(alert_episodes(history()), T0 + 600, width=70))
    assert max(len(line) for line in text.splitlines()) <= 70
    assert "no step for 420 s" in text and "×2" in text


def eight_gpus() -> HardwareSnapshot:
    gpu = {"name": "NVIDIA H200", "memory_total": 141 * 2**30, "memory_used": 100 * 2**30}
    host = HostReport(ram_total=64 * 2**30, ram_available=30 * 2**30)
    return HardwareSnapshot(ts=0.0, gpus=[GpuReport(index=i, **gpu) for i in range(8)], host=host)  # type: ignore[arg-type]


def test_more_gpus_than_rows_are_counted_and_the_host_kept() -> None:
    whole = render_hardware(eight_gpus()).splitlines()
    lines = render_hardware(eight_gpus(), height=6).splitlines()
    assert len(lines) == 6 and lines[-1] == whole[-1]  # the host's line stays
    assert sum("util" in line for line in lines) == 4 and "+4 more GPUs" in lines[-2]


async def test_hardware_of_eight_gpus_shown_at_80x24_keeps_every_box_whole(home: Path) -> None:
    run = fixed_run(home)
    app = MemtuiApp(run, live=False, view=stored_view(run).with_hardware(eight_gpus()), clock=lambda: NOW)
    async with app.run_test(size=SMALL) as pilot:
        await pilot.press("6")
        await until(lambda: "more GPUs" in text_of(app.query_one(HardwarePanel).body), what="GPUs counted")
        assert cut_panels(app) == []
