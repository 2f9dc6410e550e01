"""EnvironmentDoctor with a fake NVML: verdicts from readings, NVML raising, values at limits."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.doctor.examiner import EnvironmentDoctor
from engine.doctor.findings import NO_GPU, judge, verdict_of
from engine.doctor.hardware_probe import HardwareProbe
from engine.doctor.nvml_probe import probe_gpu, probe_gpus, throttle_names
from engine.doctor.package_facts import read_module_constants
from engine.hardware_report import DiskReport, HardwareSnapshot, HostReport, SoftwareReport
from tests.fakes.fake_nvml import FakeNvml, FakeNvmlError, GiB, healthy_gpu

CUDA_SW = SoftwareReport(
    python="3.11", torch="2.4.0+cu121", torch_cuda="12.1", deepspeed="0.15", driver="550", driver_cuda="12.4"
)


def doctor(tmp_path: Path, nvml: FakeNvml | None) -> EnvironmentDoctor:
    return EnvironmentDoctor(nvml, run_dir=tmp_path)


def hardware(nvml: FakeNvml | None, **host: object) -> HardwareSnapshot:
    gpus, why = probe_gpus(nvml)
    return HardwareSnapshot(ts=0.0, nvml=why, gpus=gpus, host=HostReport(**host))  # type: ignore[arg-type]


def messages(sw: SoftwareReport, hw: HardwareSnapshot) -> list[str]:
    return [f.message for f in judge(sw, hw)]


def test_healthy_gpu_machine_is_healthy() -> None:
    findings = judge(CUDA_SW, hardware(FakeNvml()))
    assert verdict_of(findings) == "healthy", findings


def test_nvml_init_raising_is_no_gpu_never_an_exit(tmp_path: Path) -> None:
    nvml = FakeNvml(fail={"init": FakeNvmlError("Driver Not Loaded")})
    report = doctor(tmp_path, nvml).examine()
    assert report.verdict == "degraded"
    assert report.hardware.gpus == [] and report.hardware.nvml == "NVML: Driver Not Loaded"
    assert any(NO_GPU in r for r in report.reasons)
    assert report.software.driver is None and "Driver Not Loaded" in report.software.unavailable["driver"]
    assert report.software.accelerator == "cpu" and report.software.accelerator_count == 0


def test_no_pynvml_at_all(tmp_path: Path) -> None:
    report = doctor(tmp_path, None).examine()
    assert report.verdict in ("degraded", "healthy") and "not installed" in (report.hardware.nvml or "")


def test_each_raising_call_leaves_only_its_readings_unavailable() -> None:
    nvml = FakeNvml(fail={"power": FakeNvmlError("Not Supported"), "pcie": FakeNvmlError("Not Supported")})
    gpu = probe_gpu(nvml, 0)
    assert gpu.power_w is None and gpu.power_limit_w is None and gpu.pcie_gen is None
    assert gpu.unavailable["power_w"] == "NVML: Not Supported"
    assert set(gpu.unavailable) == {
        "power_w",
        "power_limit_w",
        "pcie_gen",
        "pcie_width",
        "pcie_max_gen",
        "pcie_max_width",
    }
    assert gpu.temperature_c == 60 and gpu.memory_total == 80 * GiB
    # Missing readings are information, not a verdict.
    assert verdict_of(judge(CUDA_SW, hardware(nvml))) == "healthy"


def test_device_count_raising_means_no_gpus() -> None:
    gpus, why = probe_gpus(FakeNvml(fail={"device_count": RuntimeError("GPU is lost")}))
    assert gpus == [] and why == "NVML: GPU is lost"


def test_temperature_at_limits() -> None:
    at_slowdown_margin = healthy_gpu(temperature=85)  # slowdown 90, margin 5
    below = healthy_gpu(temperature=84)
    near_shutdown = healthy_gpu(temperature=90)  # shutdown 95
    assert verdict_of(judge(CUDA_SW, hardware(FakeNvml([below])))) == "healthy"
    assert verdict_of(judge(CUDA_SW, hardware(FakeNvml([at_slowdown_margin])))) == "degraded"
    assert verdict_of(judge(CUDA_SW, hardware(FakeNvml([near_shutdown])))) == "unhealthy"


def test_ecc_throttle_pcie_and_neighbours() -> None:
    assert verdict_of(judge(CUDA_SW, hardware(FakeNvml([healthy_gpu(ecc=1)])))) == "unhealthy"
    throttled = messages(CUDA_SW, hardware(FakeNvml([healthy_gpu(throttle=0x40 | 0x1)])))
    assert any("hw_thermal" in m for m in throttled) and not any("idle" in m for m in throttled)
    assert any(
        "x8 of x16" in m for m in messages(CUDA_SW, hardware(FakeNvml([healthy_gpu(pcie=(4, 8, 5, 16))])))
    )
    crowded = healthy_gpu(processes=[(os.getppid(), 20 * GiB)])  # a process here, not ours
    assert any("other processes hold 20.0 GiB" in m for m in messages(CUDA_SW, hardware(FakeNvml([crowded]))))


def test_our_own_processes_are_not_neighbours() -> None:
    gpus, _ = probe_gpus(FakeNvml([healthy_gpu(processes=[(1234, 70 * GiB)])]), frozenset({1234}))
    hw = HardwareSnapshot(ts=0.0, gpus=gpus)
    assert verdict_of(judge(CUDA_SW, hw)) == "healthy" and gpus[0].processes[0].ours


def test_driver_older_than_torch_cuda_build() -> None:
    old_driver = CUDA_SW.model_copy(update={"driver_cuda": "11.8"})
    found = messages(old_driver, hardware(FakeNvml()))
    assert any("supports CUDA up to 11.8" in m for m in found)
    assert verdict_of(judge(old_driver, hardware(FakeNvml()))) == "unhealthy"


def test_a_driver_of_the_same_cuda_major_runs_a_newer_minor_build() -> None:
    # torch cu128 on a 12.4 driver: CUDA's minor-version compatibility runs it.
    minor = CUDA_SW.model_copy(update={"torch_cuda": "12.8", "driver_cuda": "12.4"})
    found = messages(minor, hardware(FakeNvml()))
    assert any("minor-version compatibility" in m for m in found)
    assert verdict_of(judge(minor, hardware(FakeNvml()))) == "healthy"
    major = CUDA_SW.model_copy(update={"torch_cuda": "13.0", "driver_cuda": "12.9"})
    assert verdict_of(judge(major, hardware(FakeNvml()))) == "unhealthy"


def test_cpu_torch_with_gpus_is_unhealthy() -> None:
    cpu_torch = CUDA_SW.model_copy(update={"torch_cuda": None})
    assert verdict_of(judge(cpu_torch, hardware(FakeNvml()))) == "unhealthy"


def test_disk_and_ram_at_limits() -> None:
    def host(free: int, avail: int = 50 * GiB) -> HardwareSnapshot:
        disk = DiskReport(label="checkpoints", path="/x", free_bytes=free, total_bytes=100 * GiB)
        return hardware(FakeNvml(), disks=[disk], ram_total=100 * GiB, ram_available=avail)

    assert verdict_of(judge(CUDA_SW, host(10 * GiB))) == "healthy"
    assert verdict_of(judge(CUDA_SW, host(10 * GiB - 1))) == "degraded"
    assert verdict_of(judge(CUDA_SW, host(2 * GiB - 1))) == "unhealthy"
    assert verdict_of(judge(CUDA_SW, host(50 * GiB, avail=9 * GiB))) == "degraded"


def test_disk_thresholds_follow_the_disk_size_above_a_floor() -> None:
    """A 40 MB disk with 35 MB free is not full (the threshold is a share of its size);
    one with 10 MiB free is, below the absolute floor; the figures are in MiB."""
    mib = 1 << 20

    def judged(free: int, total: int) -> tuple[str, list[str]]:
        disk = DiskReport(label="run", path="/r", free_bytes=free, total_bytes=total)
        findings = judge(CUDA_SW, hardware(FakeNvml(), disks=[disk]))
        return verdict_of(findings), [f.message for f in findings if "disk" in f.message]

    verdict, said = judged(35_000_000, 40_000_000)
    assert verdict != "unhealthy" and all("0.0 GiB" not in m for m in said)
    assert judged(10 * mib, 40_000_000) == (
        "unhealthy",
        ["run disk nearly full: 10.0 MiB free of 38.1 MiB at /r"],
    )
    assert judged(300 * GiB, 1000 * GiB)[0] == "healthy"
    assert judged(2 * GiB - 1, 1000 * GiB)[0] == "unhealthy"  # a large disk: the absolute figure


def test_report_serializes_and_round_trips(tmp_path: Path) -> None:
    report = doctor(tmp_path, FakeNvml([healthy_gpu(), healthy_gpu(temperature=88)])).examine()
    assert report.software.accelerator == "cuda" and report.software.accelerator_count == 2
    from engine.hardware_report import DoctorReport

    assert DoctorReport.model_validate_json(report.model_dump_json()) == report


def test_software_facts_come_from_files_without_importing_torch() -> None:
    sw = EnvironmentDoctor(FakeNvml()).software()
    if sw.torch is None:
        pytest.skip("torch not installed")
    assert sw.torch and sw.deepspeed and sw.driver == "550.54.15" and sw.driver_cuda == "12.4"
    assert read_module_constants("no_such_package_xyz", "version.py") is None


def test_throttle_names_ignore_idle_bits() -> None:
    assert throttle_names(0x1 | 0x2) == [] and throttle_names(0x4 | 0x20) == ["sw_power_cap", "sw_thermal"]


def test_host_probe_reports_own_processes_and_disks(tmp_path: Path) -> None:
    import os

    probe = HardwareProbe(
        None, {"run": tmp_path, "checkpoints": tmp_path / "not" / "yet"}, lambda: {"supervisor": os.getpid()}
    )
    first, second = probe.read(), probe.read()
    assert first.host.processes[0].cpu_pct is None and second.host.processes[0].cpu_pct is not None
    assert second.host.processes[0].rss_bytes and all(d.free_bytes for d in second.host.disks)
    assert second.nvml and second.host.cpu_count


def test_host_cpu_is_the_rate_since_the_previous_reading_whichever_thread_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The supervisor reads in ``asyncio.to_thread``'s pool. psutil's own ``cpu_percent``
    keeps one previous reading per thread, so a pool thread's first reading said 0% of a
    busy host, and the others a rate over whatever window that thread had last read."""
    from collections import namedtuple
    from concurrent.futures import ThreadPoolExecutor

    import psutil

    times = namedtuple("times", "user nice system idle iowait irq softirq steal guest guest_nice")
    # CPU seconds of a 2-core host: 10 s apart, 15 of the 20 busy (75%), then 5 of 20 (25%);
    # guest time is inside user time (Linux) and iowait is idle
    clock = iter(
        [
            times(100.0, 0.0, 50.0, 300.0, 10.0, 0.0, 0.0, 0.0, 5.0, 0.0),
            times(110.0, 0.0, 55.0, 303.0, 12.0, 0.0, 0.0, 0.0, 8.0, 0.0),
            times(113.0, 0.0, 57.0, 316.0, 14.0, 0.0, 0.0, 0.0, 9.0, 0.0),
        ]
    )
    monkeypatch.setattr(psutil, "cpu_times", lambda percpu=False: next(clock))
    probe = HardwareProbe(None, {}, lambda: {})
    readings = []
    for _ in range(3):  # each reading on a new thread, as the pool may hand them out
        with ThreadPoolExecutor(1) as pool:
            readings.append(pool.submit(probe.read).result().host.cpu_pct)
    assert readings == [None, 75.0, 25.0]  # none before a previous reading; never a made-up 0%


def test_pids_of_another_namespace_are_not_counted_as_other_processes() -> None:
    # Inside a container NVML reports host pids: the trainer's is no process here.
    host_pid = max(int(p) for p in os.listdir("/proc") if p.isdigit()) + 1_000_000
    gpu = healthy_gpu(processes=[(host_pid, 70 * GiB), (os.getppid(), 1 * GiB)])
    gpus, _ = probe_gpus(FakeNvml([gpu]), frozenset({os.getpid()}))
    assert [p.ours for p in gpus[0].processes] == [None, None]
    found = messages(CUDA_SW, HardwareSnapshot(ts=0.0, gpus=gpus))
    assert not any("other processes hold" in m for m in found)
    assert any("2 process(es) cannot be attributed" in m for m in found)
    assert verdict_of(judge(CUDA_SW, HardwareSnapshot(ts=0.0, gpus=gpus))) == "healthy"


def test_wsl2_is_said_with_its_limits_and_several_gpus_there_are_degraded() -> None:
    wsl = "5.15.153.1-microsoft-standard-WSL2"
    one = judge(CUDA_SW, hardware(FakeNvml(), kernel=wsl))
    (said,) = [f for f in one if f.message.startswith("WSL2:")]
    assert said.level == "info" and "pinned host memory is capped" in said.message
    two = judge(CUDA_SW, hardware(FakeNvml([healthy_gpu(), healthy_gpu()]), kernel=wsl))
    assert [f.level for f in two if f.message.startswith("WSL2:")] == ["degraded"]  # no peer-to-peer
    linux = judge(CUDA_SW, hardware(FakeNvml(), kernel="6.8.0-45-generic"))
    assert not any("WSL" in f.message for f in linux)


def test_the_host_probe_reads_the_kernel_release() -> None:
    import platform

    assert HardwareProbe(None, disks={}).host({}).kernel == (platform.release() or None)
