"""The hardware panel's pure renderer and the alert state, at their limits (no app)."""

from __future__ import annotations

import pytest
from textual.content import Content

from engine.hardware_report import DiskReport, GpuProcess, GpuReport, HardwareSnapshot, HostReport
from memtui.cli.main import build_parser
from memtui.console.alert_state import critical_after, critical_banner, rings_bell, toast
from memtui.console.run_view import RunView
from memtui.console.widgets.hardware_panel import hardware_title, render_hardware
from tests.fakes.run_script import doctor_data, make_event, make_sample

GiB = 1 << 30


def plain(markup: str) -> str:
    return str(Content.from_markup(markup))  # also proves the markup parses


def test_nothing_yet_and_no_nvml() -> None:
    assert "waiting for the first hardware reading" in plain(render_hardware(None))
    text = plain(render_hardware(HardwareSnapshot(ts=0.0, nvml="NVML: Driver Not Loaded")))
    assert text.splitlines()[0].startswith("no GPU: NVML unavailable (Driver Not Loaded)")
    assert "no GPU: NVML unavailable (NVML found no devices)" in plain(
        render_hardware(HardwareSnapshot(ts=0))
    )


def test_every_reading_unavailable_is_a_placeholder_not_a_crash() -> None:
    gone = {"memory_used": "NVML: Not Supported", "power_w": "NVML: Not Supported"}
    snapshot = HardwareSnapshot(
        ts=0.0,
        gpus=[GpuReport(index=0, unavailable=gone)],
        host=HostReport(
            disks=[DiskReport(label="checkpoints", path="/x", unavailable="PermissionError: denied")],
            unavailable={"cpu_pct": "boom"},
        ),
    )
    text = plain(render_hardware(snapshot, make_sample(1, mem_kind="cuda")))
    assert "GPU0 util    —" in text and "mem —/—" in text and "—°C" in text and "— W" in text
    assert "alloc" in text  # the only GPU, the allocator's numbers beside NVML's
    assert "checkpoints — (PermissionError: denied)" in text and "CPU —" in text
    assert "psutil" not in text
    host_gone = HardwareSnapshot(ts=0.0, host=HostReport(unavailable={"psutil": "ImportError: no psutil"}))
    assert "host readings unavailable (ImportError: no psutil)" in plain(render_hardware(host_gone))


def test_values_at_their_limits_are_flagged() -> None:
    hot = GpuReport(
        index=7,
        name="NVIDIA H200",
        memory_total=141 * GiB,
        memory_used=141 * GiB,
        utilization_pct=100,
        temperature_c=90,
        temperature_slowdown_c=90,
        power_w=750.0,
        power_limit_w=700.0,
        throttle_reasons=["sw_power_cap", "hw_thermal"],
        ecc_uncorrected=3,
        processes=[GpuProcess(pid=1, ours=True), GpuProcess(pid=2), GpuProcess(pid=3)],
    )
    idle = GpuReport(index=0, utilization_pct=0, temperature_c=30, throttle_reasons=["sw_power_cap"])
    host = HostReport(
        ram_total=64 * GiB,
        ram_available=0,
        disks=[DiskReport(label="run", path="/", free_bytes=0, total_bytes=GiB)],
    )
    markup = render_hardware(
        HardwareSnapshot(ts=0.0, gpus=[idle, hot], host=host), make_sample(1, mem_kind="cuda"), reporter=1
    )
    lines = markup.splitlines()
    assert "[$text-warning]  0%" in lines[0] and "[$text-warning]throttled: sw_power_cap" in lines[0]
    assert "alloc" not in lines[0] and "alloc" in lines[1]  # our trainer holds GPU 7
    assert "[$text-error]141 GiB[/]" in lines[1] and "[$text-error]90°C" in lines[1]
    assert (
        "[$text-warning]750[/]/700 W" in lines[1]
        and "[$text-error]throttled: sw_power_cap, hw_thermal" in lines[1]
    )
    assert "ECC 3" in lines[1] and "+2 other procs" in lines[1]
    assert "[$text-warning]0 B free" in markup and "[$text-warning]64.0 GiB[/]/64.0 GiB" in markup
    assert "8× " not in hardware_title(HardwareSnapshot(ts=0.0)) and "2× NVIDIA H200" in hardware_title(
        HardwareSnapshot(ts=0.0, gpus=[idle, hot])
    )


@pytest.mark.parametrize("count", [1, 8])
def test_one_line_per_gpu_plus_host(count: int) -> None:
    gpus = [GpuReport(index=i, utilization_pct=50) for i in range(count)]
    host = HostReport(cpu_count=2, disks=[DiskReport(label="run", path="/", free_bytes=1)])
    lines = plain(render_hardware(HardwareSnapshot(ts=0.0, gpus=gpus, host=host))).splitlines()
    assert len(lines) == count + 2 and lines[-1].startswith("disk")


def alert(seq: int, rule: str, severity: str, state: str = "firing"):  # type: ignore[no-untyped-def]
    return make_event(seq, "alert", f"{rule} {state}", severity=severity, data={"rule": rule, "state": state})


def test_critical_alerts_stay_active_until_resolved() -> None:
    view = RunView()
    for event in (
        alert(1, "disk_low", "critical"),
        alert(2, "gpu_temperature.0", "warning"),
        alert(3, "heartbeat", "critical"),
        alert(4, "disk_low", "critical"),  # a reminder: still one entry
        alert(5, "heartbeat", "info", "resolved"),
    ):
        view = view.with_event(event)
    assert [e.seq for e in view.critical_alerts] == [4]
    assert critical_banner(view.critical_alerts) == "⚠ CRITICAL: disk_low"
    assert critical_banner(()) == ""
    assert critical_after(make_event(6, "note"), view.critical_alerts) is view.critical_alerts
    assert toast(alert(7, "heartbeat", "critical"))[2:] == ("error", 30.0)
    assert toast(alert(8, "heartbeat", "info", "resolved"))[0] == "alert · heartbeat · resolved"
    assert rings_bell(alert(9, "x", "warning")) and not rings_bell(alert(10, "x", "info", "resolved"))


def test_a_stored_doctor_report_seeds_the_hardware_view() -> None:
    snapshot = HardwareSnapshot(ts=5.0, nvml="NVML: no driver")
    report = make_event(1, "doctor_report", "doctor: degraded", data=doctor_data(hardware=snapshot))
    view = RunView().with_event(report)
    assert view.hardware == snapshot
    assert view.with_hardware(HardwareSnapshot(ts=4.0)) is view  # older: ignored
    broken = make_event(2, "doctor_report", data={"hardware": {"ts": "x"}})
    assert view.with_event(broken).hardware == snapshot


@pytest.mark.parametrize("argv", [["--bell"], ["attach", "--bell"], ["run", "--bell"]])
def test_bell_flag(argv: list[str]) -> None:
    assert build_parser().parse_args(argv).bell is True
    assert build_parser().parse_args(argv[:-1]).bell is False


def test_processes_of_another_pid_namespace_are_said_unattributed() -> None:
    gpu = GpuReport(index=0, processes=[GpuProcess(pid=7, ours=None), GpuProcess(pid=8, ours=None)])
    text = plain(render_hardware(HardwareSnapshot(ts=0.0, gpus=[gpu])))
    assert "2 procs unattributed" in text and "other proc" not in text


def test_the_allocator_figures_go_to_the_gpu_the_reporting_rank_holds() -> None:
    """Rank 1 holds GPU 0 and rank 0 (which reports) GPU 1, as CUDA_VISIBLE_DEVICES=1,0 or
    another NVML order gives: the figures go on GPU 1's line, found by rank 0's pid."""
    rank1 = GpuReport(index=0, processes=[GpuProcess(pid=200, ours=True)])
    rank0 = GpuReport(index=1, processes=[GpuProcess(pid=100, ours=True)])
    snapshot = HardwareSnapshot(ts=0.0, gpus=[rank1, rank0])
    lines = plain(render_hardware(snapshot, make_sample(1, mem_kind="cuda"), reporter=100)).splitlines()
    assert "alloc" not in lines[0] and "alloc" in lines[1]
    unknown = plain(render_hardware(snapshot, make_sample(1, mem_kind="cuda"))).splitlines()
    assert not any(
        "alloc" in line for line in unknown[:2]
    )  # no pid known: on no line rather than a wrong one
