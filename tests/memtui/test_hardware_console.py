"""The hardware panel and alerts in the console (Pilot) against the scripted transport."""

from __future__ import annotations

import time

import pytest
from textual.geometry import Size

from engine.hardware_report import (
    DiskReport,
    GpuProcess,
    GpuReport,
    HardwareSnapshot,
    HostReport,
    ProcessReport,
)
from engine.run.directory import RunDir
from engine.wire.protocol import Hardware
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.widgets.event_log import EventLog
from memtui.console.widgets.hardware_panel import HardwarePanel
from memtui.console.widgets.run_header import RunHeader
from tests.fakes.run_script import doctor_data, make_event, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.memtui.console_harness import caught_up, drawn, recorded_notes, text_of, toasts
from tests.waiting import until

GiB = 1 << 30
WIDE = (160, 48)


def host(**over: object) -> HostReport:
    fields: dict[str, object] = dict(
        cpu_count=16,
        load_1m=3.5,
        cpu_pct=42.0,
        ram_total=64 * GiB,
        ram_available=40 * GiB,
        disks=[DiskReport(label="run", path="/r", free_bytes=100 * GiB, total_bytes=500 * GiB)],
        processes=[
            ProcessReport(role="supervisor", pid=10, cpu_pct=1.5, rss_bytes=80 << 20),
            ProcessReport(role="trainer", pid=11, cpu_pct=97.0, rss_bytes=3 * GiB),
        ],
    )
    fields.update(over)
    return HostReport(**fields)  # type: ignore[arg-type]


def gpu_snapshot(ts: float = 1_700_000_000.0, **over: object) -> HardwareSnapshot:
    gpu: dict[str, object] = dict(
        index=0,
        name="Fake H100",
        memory_total=80 * GiB,
        memory_used=30 * GiB,
        utilization_pct=95,
        temperature_c=62,
        temperature_slowdown_c=90,
        power_w=400.0,
        power_limit_w=700.0,
        processes=[GpuProcess(pid=11, used_bytes=29 * GiB, ours=True)],
    )
    gpu.update(over)
    return HardwareSnapshot(ts=ts, gpus=[GpuReport(**gpu)], host=host())  # type: ignore[arg-type]


def no_nvml(ts: float = 1_700_000_000.0) -> HardwareSnapshot:
    return HardwareSnapshot(ts=ts, nvml="NVML: NVML Shared Library Not Found", host=host())


def alert(fake: ScriptedEngine, rule: str, severity: str, state: str = "firing", message: str = "") -> None:
    fake.add_event(
        "alert", message or f"{rule} {state}", severity=severity, data={"rule": rule, "state": state}
    )


async def test_hardware_reading_renders_beside_the_allocator(live_run: RunDir) -> None:
    cuda = [make_sample(s, mem_kind="cuda", mem_allocated=20 * GiB, mem_reserved=24 * GiB) for s in (1, 2)]
    stream = [Hardware(snapshot=gpu_snapshot()), *telemetry(cuda)]
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), stream=stream) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=WIDE):
            await until(lambda: app.view.hardware is not None and app.view.step == 2)
            fake.send_hardware(gpu_snapshot(ts=1_700_000_010.0, throttle_reasons=["hw_thermal"]))
            await until(lambda: app.view.hardware is not None and app.view.hardware.ts == 1_700_000_010.0)
            panel = app.query_one(HardwarePanel)
            assert panel.display
            await until(lambda: "throttled: hw_thermal" in text_of(panel))  # the new reading, drawn
            text = text_of(panel)
            assert "GPU0" in text and "95%" in text and "62°C" in text and "400/700 W" in text
            assert "30.0 GiB/80.0 GiB" in text and "alloc 20.0 GiB" in text and "rsv 24.0 GiB" in text
            assert "throttled: hw_thermal" in text
            assert "CPU 42% of 16" in text and "24.0 GiB/64.0 GiB" in text and "100 GiB free" in text
            assert "trainer 97% 3.00 GiB" in text and "supervisor 2% 80.0 MiB" in text
            assert "Fake H100" in str(panel.border_title)


async def test_no_nvml_is_a_banner_not_an_error(live_run: RunDir) -> None:
    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id), stream=[Hardware(snapshot=no_nvml())]
    ):
        app = MemtuiApp(live_run)
        notes = recorded_notes(app)
        async with app.run_test(size=WIDE) as pilot:
            panel = app.query_one(HardwarePanel)
            await until(lambda: "no GPU" in text_of(panel))
            text = text_of(panel)
            assert "no GPU: NVML unavailable (NVML Shared Library Not Found)" in text
            assert "CPU 42%" in text and "trainer 97%" in text  # the rest still shows
            await caught_up(app, pilot)  # an error the engine sent would have been toasted by now
            assert not [t for t in toasts(notes) if "error" in t.lower()]


async def test_compact_layout_hides_hardware_until_toggled(live_run: RunDir) -> None:
    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id), stream=[Hardware(snapshot=no_nvml())]
    ):
        app = MemtuiApp(live_run)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(lambda: app.view.hardware is not None)
            panel = app.query_one(HardwarePanel)
            assert not panel.display
            await pilot.press("6")
            assert panel.display
            await until(lambda: "no GPU" in text_of(panel))
            await pilot.press("6")
            assert not panel.display
            assert any("hardware" in c[0] for c in app.palette_commands())


async def test_hardware_panel_redraws_only_on_a_new_reading(
    live_run: RunDir, monkeypatch: pytest.MonkeyPatch
) -> None:
    samples = [make_sample(s) for s in range(1, 80)]
    # Each drawing, from the first (the reading may arrive before the first step): the reading's
    # time and the panel's size (a first drawing that grows the panel is drawn again at its new
    # size; that is not a new reading).
    drawings: list[tuple[float | None, Size]] = []
    original = HardwarePanel.draw

    def counted(panel: HardwarePanel, view: RunView, now: float) -> str:
        drawings.append((view.hardware.ts if view.hardware else None, panel.content_size))
        return original(panel, view, now)

    monkeypatch.setattr(HardwarePanel, "draw", counted)
    stream = [Hardware(snapshot=no_nvml()), *telemetry(samples)]
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), stream=stream) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=WIDE):
            panel = app.query_one(HardwarePanel)
            await until(lambda: panel._view is not None and panel._view.step == 79)  # handed the last step
            first = [key for key in drawings if key[0] is not None]
            assert first and len(first) == len(set(first))  # 79 steps, no drawing for the same reading
            fake.send_hardware(no_nvml(ts=1_700_000_100.0))
            await until(lambda: any(ts == 1_700_000_100.0 for ts, _ in drawings))
            fake.send_telemetry(make_sample(80))  # a step after the new reading
            await until(lambda: panel._view is not None and panel._view.step == 80)
            assert [ts for ts, _ in drawings].count(1_700_000_100.0) == 1


@pytest.mark.parametrize("bell", [False, True])
async def test_live_alerts_toast_mark_the_header_and_ring_only_when_asked(
    live_run: RunDir, bell: bool
) -> None:
    old = make_event(
        1, "alert", "an old alert", severity="critical", data={"rule": "loss_nan", "state": "firing"}
    )
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), events=[old]) as fake:
        app = MemtuiApp(live_run, bell=bell)
        rung: list[float] = []
        app.bell = lambda: rung.append(time.monotonic())  # type: ignore[method-assign]
        notes = recorded_notes(app)
        async with app.run_test(size=WIDE) as pilot:
            await until(lambda: app.view.last_seq >= 1 and app.view.connection == "connected")
            header = app.query_one(RunHeader)
            await until(lambda: "CRITICAL: loss_nan" in text_of(header))  # history is still active ...
            await caught_up(app, pilot)
            assert toasts(notes) == []  # ... but replayed, it is not announced again

            seq = fake.events[-1].seq
            alert(fake, "heartbeat", "critical", message="no step for 12 s (limit 10 s)")
            await until(lambda: app.view.last_seq == seq + 1)
            await until(lambda: "CRITICAL ×2: loss_nan, heartbeat" in text_of(header))
            assert any("heartbeat" in t and "no step for 12 s" in t for t in toasts(notes))
            assert len(rung) == (1 if bell else 0)

            alert(fake, "heartbeat", "info", state="resolved", message="resolved: heartbeat")
            alert(fake, "loss_nan", "info", state="resolved", message="resolved: loss nan")
            alert(fake, "gpu_temperature.0", "warning", message="GPU 0 at 86 C")
            await until(lambda: app.view.last_seq == seq + 4)
            await until(lambda: "CRITICAL" not in text_of(header))  # drawn: both resolved
            assert any("resolved: heartbeat" in t for t in toasts(notes))
            assert len(rung) == (2 if bell else 0)  # the warning rings, "resolved" does not
            log = app.query_one(EventLog)
            log.kind = "alerts"
            log.show(app.view, time.time())
            assert "resolved: heartbeat" in text_of(log) and "GPU 0 at 86 C" in text_of(log)


@pytest.mark.parametrize("size", [(80, 24), WIDE], ids=["80x24", "wide"])
async def test_a_warning_alert_stays_in_the_header_until_resolved(
    live_run: RunDir, size: tuple[int, int]
) -> None:
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id)) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=size) as pilot:
            await until(lambda: app.view.connection == "connected")
            header = app.query_one(RunHeader)
            alert(fake, "throughput_drop", "warning", message="tokens/s 400 is 60% below its baseline 1,000")
            alert(fake, "restart", "warning", message="trainer restarted: killed")  # an instant
            await until(lambda: "⚠ warning: throughput_drop" in text_of(header))
            await caught_up(app, pilot)
            await drawn(app, pilot)
            assert "⚠ warning: throughput_drop" in header_lines(app)[0]  # on screen, not cut off
            assert "restart" not in text_of(header).split("⚠ warning:")[1]
            alert(fake, "memory_headroom", "warning", message="memory 95% of budget")
            await until(lambda: "⚠ warnings ×2: throughput_drop, memory_headroom" in text_of(header))
            alert(fake, "throughput_drop", "info", state="resolved", message="resolved: throughput drop")
            await until(lambda: "⚠ warning: memory_headroom" in text_of(header))


# ------------------------------------------------------- the environment in every layout


def doctor_event(fake: ScriptedEngine, verdict: str, *findings: tuple[str, str]) -> None:
    fake.add_event(
        "doctor_report", f"doctor: {verdict}", severity="warning", data=doctor_data(verdict, findings)
    )


def header_lines(app: MemtuiApp) -> list[str]:
    """The header's lines as they are on screen (cut at its width), not its markup."""
    header = app.query_one(RunHeader)
    return [header.render_line(y).text for y in range(header.size.height)]


@pytest.mark.parametrize("size", [(80, 24), WIDE], ids=["80x24", "wide"])
async def test_no_gpu_and_the_doctor_s_verdict_show_in_the_header_in_every_layout(
    live_run: RunDir, size: tuple[int, int]
) -> None:
    from engine.doctor.findings import NO_GPU

    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id), stream=[Hardware(snapshot=no_nvml())]
    ) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=size) as pilot:
            await until(lambda: app.view.hardware is not None)
            await until(lambda: "no GPU" in " ".join(header_lines(app)))
            assert app.query_one(HardwarePanel).display is (size == WIDE)  # compact: hidden
            lines = header_lines(app)
            assert len(lines) == 2 and "⚠ no GPU: CPU training" in lines[0]  # on screen, not cut off
            if size == WIDE:
                assert "(NVML Shared Library Not Found)" in lines[0]
            doctor_event(fake, "degraded", ("degraded", f"{NO_GPU} (NVML: x)"))
            await until(lambda: any(e.type == "doctor_report" for e in app.view.events))
            await drawn(app, pilot)
            assert "doctor" not in " ".join(header_lines(app))  # no GPU is said once, not twice
            doctor_event(fake, "unhealthy", ("unhealthy", "checkpoints disk nearly full: 1.2 GiB free at /r"))
            await until(lambda: sum(e.type == "doctor_report" for e in app.view.events) == 2)
            await until(lambda: "doctor: unhealthy" in " ".join(header_lines(app)))
            lines = header_lines(app)
            assert "doctor: unhealthy — " in lines[1] and "no GPU" in lines[0]
            if size == WIDE:
                assert "doctor: unhealthy — checkpoints disk nearly full: 1.2 GiB free at /r" in lines[1]
            assert "step" in lines[1] and app.query_one(RunHeader).size.height == 2  # no line added


async def test_with_a_gpu_and_a_healthy_doctor_the_header_says_nothing_more(live_run: RunDir) -> None:
    async with ScriptedEngine(
        live_run.socket, welcome_for(live_run.run_id), stream=[Hardware(snapshot=gpu_snapshot())]
    ) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(lambda: app.view.hardware is not None)
            doctor_event(fake, "healthy")
            await until(lambda: any(e.type == "doctor_report" for e in app.view.events))
            await drawn(app, pilot)
            text = " ".join(header_lines(app))
            assert "no GPU" not in text and "doctor" not in text and "⚠" not in text
