"""What a newcomer reads on the console: charts with their range, numbers with their precision,
run-wide figures that never drop after a reattach, a finished run that looks finished, and
events readable in full and listed once. Pure renderers first, then Pilot against the scripted
engine."""

from __future__ import annotations

import dataclasses

from textual.content import Content

from engine.domain import Event, ThroughputFigures
from engine.events import StateChanged
from engine.run.directory import RunDir
from engine.wire.protocol import Hardware
from memtui.console.app import MemtuiApp
from memtui.console.chart import render_scaled
from memtui.console.run_view import RunView
from memtui.console.screens.event_screen import EventScreen
from memtui.console.screens.keys_screen import render_keys
from memtui.console.widgets.event_log import EventLog, listed, render_events
from memtui.console.widgets.hardware_panel import render_hardware
from memtui.console.widgets.memory_panel import render_memory, render_memory_chart
from memtui.console.widgets.numerics_panel import format_loss, render_numerics
from memtui.console.widgets.throughput_panel import render_throughput
from tests.fakes.run_script import make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.memtui.console_harness import text_of
from tests.memtui.test_hardware_console import no_nvml
from tests.waiting import until

MIB = 2**20


def plain(markup: str) -> list[str]:
    return [Content.from_markup(line).plain for line in markup.splitlines()]


def fixed(values: list[float]):  # type: ignore[no-untyped-def]
    return lambda width: (values[-width:], [])


def test_a_chart_is_scaled_to_its_data_with_min_and_max_on_its_axis() -> None:
    values = [100.0, 150.0, 200.0] * 10
    rule, top, middle, bottom = plain(render_scaled("rate", fixed(values), 30, 4, style="$primary", fmt=str))
    assert rule.startswith("rate──") and len(rule) == 30
    assert top.startswith("200.0 ") and bottom.startswith("100.0 ") and middle.startswith("      ")
    plot = bottom[6:]
    assert len(plot) == 24 and " " not in plot  # the lowest value still shows: a floor under it
    assert top[6:].count("█") == 8  # every third value is the highest: full height


def test_a_flat_series_says_so_instead_of_a_wall_of_bars() -> None:
    rule, *rows = plain(render_scaled("reserved", fixed([420.0 * MIB] * 50), 40, 5, style="$accent", fmt=str))
    assert "flat at 440401920.0" in rule
    assert [r.strip() for r in rows] == ["", "▄" * 40, "", ""]


def test_too_narrow_for_a_gutter_the_range_goes_in_the_rule() -> None:
    rule, row = plain(render_scaled("t", fixed([1.0, 2.0]), 10, 2, style="$primary", fmt=str))
    assert rule.startswith("t 1.0–2.0") and len(row) == 10


def test_the_memory_chart_on_a_cpu_moves_although_the_budget_dwarfs_it() -> None:
    view = RunView()
    for step in range(1, 41):  # RSS 421..460 MiB of a 2 GiB budget: 1/5 of it, moving
        view = view.with_sample(make_sample(step, ts=1000.0 + step, mem_reserved=(420 + step) * MIB))
    rule, top, *_, bottom = plain(render_memory_chart(view, 50, 6, now=1041.0))
    assert top.startswith("460MiB ") and bottom.startswith("421MiB ")
    assert " " not in bottom[7:].strip() and "█" in bottom  # the lowest shows, a floor under it
    assert top[7:].strip().startswith("▁") and top.endswith("█")  # it climbs across the rows


def test_on_a_cpu_the_memory_bars_include_reserved_against_the_runs_own_peak() -> None:
    view = RunView().with_sample(make_sample(1, mem_reserved=400 * MIB, mem_peak=500 * MIB))
    lines = plain(render_memory(view, 60))
    of_peak = next(line for line in lines if line.startswith("of peak"))
    assert "500 MiB" in of_peak and "80.0%" in of_peak
    cuda = RunView().with_sample(make_sample(1, mem_kind="cuda"))
    assert not any(line.startswith("of peak") for line in plain(render_memory(cuda, 60)))


def test_the_loss_keeps_its_decimals() -> None:
    assert format_loss(3.0) == "3.000" and format_loss(3.61449) == "3.614" and format_loss(None) == "—"
    assert format_loss(0.000123) == "1.230e-04" and format_loss(float("nan")) == "nan"
    view = RunView().with_sample(make_sample(1, loss=3.0))
    assert plain(render_numerics(view))[:2] == ["loss      3.000", "smoothed  3.000"]


def figures(avg: float, peak: float, attempt: int = 1) -> ThroughputFigures:
    return ThroughputFigures(
        run_avg_tokens_per_s=avg,
        run_peak_tokens_per_s=peak,
        attempt=attempt,
        attempt_avg_tokens_per_s=avg,
        window_steps=50,
    )


def test_avg_and_peak_are_the_runs_and_say_so() -> None:
    view = RunView().with_sample(make_sample(1, tokens_per_s=9_000.0))
    assert "(so far)" in plain(render_throughput(view))[1]  # the store not read yet: labelled
    # after a reattach the console has seen only slower steps; the run's peak still shows
    view = view.with_run_throughput(figures(20_000.0, 24_900.0))
    assert plain(render_throughput(view))[1] == "avg 20.0k  peak 24.9k tok/s (run)"
    assert "attempt" not in plain(render_throughput(view))[2]
    two = view.with_run_throughput(figures(20_000.0, 24_900.0, attempt=2))
    assert "attempt 2 avg 20.0k" in plain(render_throughput(two))[2]


def ended(view: RunView, at: float) -> RunView:
    change = StateChanged.model_validate({"from": "running", "to": "completed"})
    return view.with_event(make_event(view.last_seq + 1, change, "completed", ts=at))


def test_a_finished_run_shows_final_figures_not_live_ones() -> None:
    view = dataclasses.replace(RunView(), started_at=1000.0)
    view = view.with_sample(make_sample(300, ts=1190.0, tokens_per_s=24_900.0))
    view = ended(view.with_run_throughput(figures(21_000.0, 25_000.0)), at=1192.0)
    first, second, _ = plain(render_throughput(view))
    assert first == "completed at step 300, ran 3m12s" and "now" not in first
    assert second == "avg 21.0k  peak 25.0k tok/s (run)"


def test_the_hardware_panel_drops_readings_of_processes_that_are_gone() -> None:
    snapshot = no_nvml()
    assert "trainer 97%" in "\n".join(plain(render_hardware(snapshot)))
    gone = "\n".join(plain(render_hardware(snapshot, ended=True)))
    assert "trainer" not in gone and "supervisor" not in gone and "none: the run has ended" in gone
    assert "CPU 42% of 16" in gone  # the host's own readings stay


def test_an_event_is_listed_once() -> None:
    doctor = [make_event(n, "doctor_report", "doctor: healthy") for n in (1, 3)]
    events = [doctor[0], make_event(2, "trainer_started", "trainer attempt 1"), doctor[1]]
    assert [(e.seq, n) for e, n in listed(events)] == [(1, 1), (2, 1)]
    changed = make_event(4, "doctor_report", "doctor: degraded (disk 96% full)")
    assert [e.seq for e, _ in listed([*events, changed])] == [1, 2, 4]
    notes = [make_event(n, "note", "same words") for n in (5, 6, 7)]
    assert [(e.seq, n) for e, n in listed(notes)] == [(7, 3)]
    assert plain(render_events(notes, 5))[0].endswith("same words ×3")


def test_the_cursor_keeps_the_selected_event_on_screen() -> None:
    events = [make_event(n, "note", f"event {n}") for n in range(1, 21)]
    shown = plain(render_events(events, 3, selected=5))
    assert [line.endswith("event 5") for line in shown] == [False, False, True]
    assert plain(render_events(events, 3))[-1].endswith("event 20")


def demo_events() -> list[Event]:
    """What an auto-cadence demo stores: a save about every second, a cadence change, a spare,
    and one chaos injection among them."""
    events = [make_event(1, "run_started", "run started: demo, 2000 steps")]
    events += [
        make_event(n, "checkpoint_saved", f"checkpoint step {n * 10} (1.1 MiB, verified)")
        for n in range(2, 20)
    ]
    events.append(make_event(20, "checkpoint_cadence", "checkpoint every 40 steps (auto)"))
    events.append(make_event(21, "standby_ready", "spare trainer ready (pid 77)"))
    events.append(make_event(22, "chaos_injected", "chaos nan injected at step 233", severity="warning"))
    events += [
        make_event(n, "checkpoint_saved", f"checkpoint step {n * 10} (1.1 MiB, verified)")
        for n in range(23, 40)
    ]
    return events


def test_routine_events_fold_into_one_live_line_with_their_counts() -> None:
    events = demo_events()
    shown = listed(events)
    assert [e.type for e, _ in shown] == ["run_started", "chaos_injected", "checkpoint_saved"]
    assert shown[-1] == (events[-1], 37)  # the newest routine event stands for all 37
    lines = plain(render_events(events, 5))
    assert lines[1].endswith("chaos nan injected at step 233")  # not pushed out by the saves
    assert "saved ×35 · cadence ×1 · spare ready ×1: checkpoint step 390 (1.1 MiB, verified)" in lines[-1]
    saves = listed(events, "checkpoints")  # the checkpoints filter lists each save
    assert len(saves) == 36 and saves[-1] == (events[-1], 1)
    warned = make_event(40, "checkpoint_saved", "checkpoint step 400 slow (9 s)", severity="warning")
    assert listed([*events, warned])[-2:] == [(events[-1], 37), (warned, 1)]  # only info events fold


async def test_the_folded_line_and_a_chaos_event_are_both_on_screen_at_80x24(live_run: RunDir) -> None:
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), events=demo_events()):
        app = MemtuiApp(live_run, clock=lambda: 0.0)
        async with app.run_test(size=(80, 24)) as pilot:
            log = app.query_one(EventLog)
            await until(
                lambda: "saved ×35" in text_of(log), what="the folded line", seen=lambda: text_of(log)
            )
            shown = text_of(log)
            assert "chaos nan injected at step 233" in shown  # the panel has 2 lines at 80x24
            assert shown.count("checkpoint step") == 1
            log.focus()
            await pilot.press("enter")  # the folded line opens its newest event in full
            await until(lambda: isinstance(app.screen, EventScreen), what="the event to open")
            assert "checkpoint step 390" in text_of(app.screen.query_one("#event-details"))


def test_keys_fold_into_columns_when_the_screen_is_short() -> None:
    keys = [(str(n), f"key {n}") for n in range(10)]
    lines = plain(render_keys(keys, rows=4))
    assert lines[0].split() == ["0", "key", "0", "4", "key", "4", "8", "key", "8"]  # down, then across
    assert len(lines) == 4 and lines[3].split() == ["3", "key", "3", "7", "key", "7"]
    assert len(plain(render_keys(keys))) == 10


async def test_enter_on_an_event_shows_its_whole_message_and_data(live_run: RunDir) -> None:
    long = "checkpoint rejected: " + "a very long reason that no panel line can hold " * 4
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id)) as fake:
        fake.add_event(
            "checkpoint_rejected", long, data={"tag": "global_step20", "reason": "sha256 mismatch"}
        )
        fake.add_event("note", "the newest")
        app = MemtuiApp(live_run, clock=lambda: 0.0)
        async with app.run_test(size=(80, 24)) as pilot:
            log = app.query_one(EventLog)
            await until(lambda: "the newest" in text_of(log), what="the events to arrive")
            log.focus()
            await pilot.press("up", "up", "enter")
            await until(lambda: isinstance(app.screen, EventScreen), what="the event to open")
            shown = text_of(app.screen.query_one("#event-details"))
            flat = " ".join(shown.split())
            assert " ".join(long.split()) in flat and '"reason": "sha256 mismatch"' in flat
            await pilot.press("escape")
            await until(lambda: not isinstance(app.screen, EventScreen), what="the modal to close")


async def test_finished_hardware_panel_redraws_when_the_run_ends(live_run: RunDir) -> None:
    stream = [Hardware(snapshot=no_nvml())]
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), stream=stream) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=(160, 48)) as pilot:
            panel = app.query_one("#hardware")
            await until(lambda: "trainer 97%" in text_of(panel), what="the process readings")
            fake.add_event(StateChanged.model_validate({"from": "running", "to": "completed"}))
            await until(lambda: "none: the run has ended" in text_of(panel), what="the ended processes")
            await pilot.pause()


def test_an_ended_runs_clock_and_chart_stop_at_its_end() -> None:
    from memtui.console.widgets.run_header import render_header

    view = dataclasses.replace(RunView(), started_at=1000.0)
    for step in range(1, 11):
        view = view.with_sample(make_sample(step, ts=1180.0 + step))
    view = ended(view, at=1192.0)
    progress = plain(render_header(view, now=5000.0))[1]
    assert "ran 3m12s" in progress and "elapsed" not in progress and "ETA" not in progress
    assert len(view.chart_points(now=5000.0)) == 10  # its last minutes, not an empty window


async def test_z_on_a_flat_series_says_it_is_flat(live_run: RunDir) -> None:
    """Maximised, the memory chart of a CPU run whose RSS does not move: one level line and
    "flat at", not a screen of equal bars."""
    steps = [make_sample(step) for step in range(1, 31)]  # every step 420 MiB reserved
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), stream=telemetry(steps)):
        app = MemtuiApp(live_run, clock=lambda: steps[-1].ts)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(lambda: app.view.step == 30, what="the steps")
            app.query_one("#memory").focus()
            await pilot.press("z")
            await until(lambda: app.screen.maximized is not None, what="the panel to fill the screen")
            chart = app.query_one("#memory").chart
            assert chart is not None
            await until(lambda: "flat" in chart.text, what="the chart redrawn", seen=lambda: chart.text)
            rule, *rows = plain(chart.text)
            assert "flat at 420MiB" in rule
            assert sum(1 for row in rows if row.strip()) == 1
