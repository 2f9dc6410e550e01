"""GPU readings through NVML, behind a small interface a test can fake.

``NvmlLibrary`` is the handful of calls the doctor needs, each by device index, in plain
units (bytes, mW, MHz, C). ``PynvmlLibrary`` is the real one (nvidia-ml-py). ``probe_gpus``
turns any of them into ``GpuReport``s: a call that raises leaves that one reading
unavailable with the reason; an ``init`` that raises (no driver, no library) means no GPUs,
with the reason. Nothing here ever exits or lets an NVML error escape. Torch-free.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterable
from typing import Any, Protocol, TypeVar

from engine.hardware_report import GpuProcess, GpuReport

T = TypeVar("T")

# Clock-throttle reason bits (nvml.h, nvmlClocksEventReasons) that cost speed; the idle,
# application-clock and display bits are left out: they are not a problem.
THROTTLE_BITS: dict[int, str] = {
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal",
    0x40: "hw_thermal",
    0x80: "hw_power_brake",
}


class NvmlLibrary(Protocol):
    """The NVML calls used; any of them may raise."""

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int:
        """e.g. 12040 for CUDA 12.4."""
        ...

    def device_count(self) -> int: ...
    def name(self, index: int) -> str: ...
    def memory(self, index: int) -> tuple[int, int]:
        """(total, used) bytes."""
        ...

    def utilization(self, index: int) -> int: ...
    def temperature(self, index: int) -> int: ...
    def temperature_threshold(self, index: int, which: str) -> int:
        """``which``: ``slowdown`` or ``shutdown``."""
        ...

    def power(self, index: int) -> tuple[int, int]:
        """(draw, enforced limit) in mW."""
        ...

    def clocks(self, index: int) -> tuple[int, int, int]:
        """(SM, memory, SM max) in MHz."""
        ...

    def throttle_reasons(self, index: int) -> int: ...
    def ecc_uncorrected(self, index: int) -> int: ...
    def pcie(self, index: int) -> tuple[int, int, int, int]:
        """(current gen, current width, max gen, max width)."""
        ...

    def nvlinks_active(self, index: int) -> int:
        """How many of the device's NVLinks are up (0 on a card without NVLink)."""
        ...

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        """(pid, used bytes or None) of compute processes."""
        ...

    def compute_capability(self, index: int) -> tuple[int, int]:
        """(major, minor): 9.0 for H100, 12.0 for RTX 50 and RTX PRO Blackwell."""
        ...


def describe_error(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return f"NVML: {text}"


def _read(unavailable: dict[str, str], names: Iterable[str], call: Callable[[], T]) -> T | None:
    """``call()``, or None with the reason recorded under each of ``names``."""
    try:
        return call()
    except Exception as err:  # NVMLError and anything a broken driver throws
        for name in names:
            unavailable[name] = describe_error(err)
        return None


def throttle_names(mask: int) -> list[str]:
    return [name for bit, name in THROTTLE_BITS.items() if mask & bit]


def probe_gpu(nvml: NvmlLibrary, index: int, own_pids: frozenset[int] = frozenset()) -> GpuReport:
    """Every reading of one device; each failing call leaves its fields unavailable."""
    gone: dict[str, str] = {}
    fields: dict[str, Any] = {"index": index}
    fields["name"] = _read(gone, ["name"], lambda: nvml.name(index))
    memory = _read(gone, ["memory_total", "memory_used"], lambda: nvml.memory(index))
    if memory is not None:
        fields["memory_total"], fields["memory_used"] = memory
    fields["utilization_pct"] = _read(gone, ["utilization_pct"], lambda: nvml.utilization(index))
    fields["temperature_c"] = _read(gone, ["temperature_c"], lambda: nvml.temperature(index))
    for which in ("slowdown", "shutdown"):
        key = f"temperature_{which}_c"
        fields[key] = _read(gone, [key], lambda w=which: nvml.temperature_threshold(index, w))  # type: ignore[misc]
    power = _read(gone, ["power_w", "power_limit_w"], lambda: nvml.power(index))
    if power is not None:
        fields["power_w"], fields["power_limit_w"] = power[0] / 1000.0, power[1] / 1000.0
    clocks = _read(gone, ["sm_clock_mhz", "memory_clock_mhz", "sm_clock_max_mhz"], lambda: nvml.clocks(index))
    if clocks is not None:
        fields["sm_clock_mhz"], fields["memory_clock_mhz"], fields["sm_clock_max_mhz"] = clocks
    mask = _read(gone, ["throttle_reasons"], lambda: nvml.throttle_reasons(index))
    fields["throttle_reasons"] = throttle_names(mask) if mask is not None else []
    fields["ecc_uncorrected"] = _read(gone, ["ecc_uncorrected"], lambda: nvml.ecc_uncorrected(index))
    pcie = _read(gone, ["pcie_gen", "pcie_width", "pcie_max_gen", "pcie_max_width"], lambda: nvml.pcie(index))
    if pcie is not None:
        fields["pcie_gen"], fields["pcie_width"], fields["pcie_max_gen"], fields["pcie_max_width"] = pcie
    capability = _read(gone, ["compute_capability"], lambda: nvml.compute_capability(index))
    if capability is not None:
        fields["compute_capability"] = f"{capability[0]}.{capability[1]}"
    procs = _read(gone, ["processes"], lambda: nvml.processes(index)) or []
    fields["processes"] = [GpuProcess(pid=pid, used_bytes=used, ours=pid in own_pids) for pid, used in procs]
    return GpuReport(**fields, unavailable=gone)


def pid_visible(pid: int) -> bool:
    """True when ``pid`` names a process in this process's pid namespace."""
    return os.path.exists(f"/proc/{pid}") if os.path.isdir("/proc") else True


def attribute(
    reports: list[GpuReport], own_pids: frozenset[int], visible: Callable[[int], bool] = pid_visible
) -> list[GpuReport]:
    """``reports`` with the processes that cannot be told apart marked ``ours=None``.

    Inside a container NVML reports the host's pids: one that is no process here shows the
    namespaces differ, and then no pid NVML gives can be trusted to name a process here
    (ours may be missed, another's may collide with one of ours). Said plainly rather than
    counting the trainer among other processes."""
    pids = [p.pid for gpu in reports for p in gpu.processes]
    if all(pid in own_pids or visible(pid) for pid in pids):
        return reports
    return [
        gpu.model_copy(update={"processes": [p.model_copy(update={"ours": None}) for p in gpu.processes]})
        for gpu in reports
    ]


def probe_gpus(
    nvml: NvmlLibrary | None, own_pids: frozenset[int] = frozenset()
) -> tuple[list[GpuReport], str | None]:
    """(reports, None), or ([], why NVML gave nothing). Never raises."""
    if nvml is None:
        return [], "NVML: nvidia-ml-py (pynvml) is not installed"
    try:
        nvml.init()
    except Exception as err:
        return [], describe_error(err)
    try:
        count = nvml.device_count()
        return attribute([probe_gpu(nvml, i, own_pids) for i in range(count)], own_pids), None
    except Exception as err:
        return [], describe_error(err)
    finally:
        with contextlib.suppress(Exception):  # a failing shutdown costs nothing we need
            nvml.shutdown()


def driver_versions(nvml: NvmlLibrary | None) -> tuple[str | None, str | None, dict[str, str]]:
    """(driver version, CUDA version the driver supports as ``12.4``, unavailable)."""
    gone: dict[str, str] = {}
    if nvml is None:
        reason = "NVML: nvidia-ml-py (pynvml) is not installed"
        return None, None, {"driver": reason, "driver_cuda": reason}
    try:
        nvml.init()
    except Exception as err:
        return None, None, {"driver": describe_error(err), "driver_cuda": describe_error(err)}
    try:
        driver = _read(gone, ["driver"], nvml.driver_version)
        cuda = _read(gone, ["driver_cuda"], nvml.cuda_driver_version)
        return driver, (f"{cuda // 1000}.{cuda % 1000 // 10}" if cuda else None), gone
    finally:
        with contextlib.suppress(Exception):
            nvml.shutdown()


class PynvmlLibrary:
    """The real NVML (nvidia-ml-py), imported on first use."""

    def __init__(self) -> None:
        import pynvml

        self._nv: Any = pynvml

    def _handle(self, index: int) -> Any:
        return self._nv.nvmlDeviceGetHandleByIndex(index)

    def init(self) -> None:
        self._nv.nvmlInit()

    def shutdown(self) -> None:
        self._nv.nvmlShutdown()

    def driver_version(self) -> str:
        return _text(self._nv.nvmlSystemGetDriverVersion())

    def cuda_driver_version(self) -> int:
        return int(self._nv.nvmlSystemGetCudaDriverVersion())

    def device_count(self) -> int:
        return int(self._nv.nvmlDeviceGetCount())

    def name(self, index: int) -> str:
        return _text(self._nv.nvmlDeviceGetName(self._handle(index)))

    def memory(self, index: int) -> tuple[int, int]:
        info = self._nv.nvmlDeviceGetMemoryInfo(self._handle(index))
        return int(info.total), int(info.used)

    def utilization(self, index: int) -> int:
        return int(self._nv.nvmlDeviceGetUtilizationRates(self._handle(index)).gpu)

    def temperature(self, index: int) -> int:
        return int(self._nv.nvmlDeviceGetTemperature(self._handle(index), self._nv.NVML_TEMPERATURE_GPU))

    def temperature_threshold(self, index: int, which: str) -> int:
        kind = {
            "slowdown": self._nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            "shutdown": self._nv.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        }[which]
        return int(self._nv.nvmlDeviceGetTemperatureThreshold(self._handle(index), kind))

    def power(self, index: int) -> tuple[int, int]:
        handle = self._handle(index)
        return int(self._nv.nvmlDeviceGetPowerUsage(handle)), int(
            self._nv.nvmlDeviceGetEnforcedPowerLimit(handle)
        )

    def clocks(self, index: int) -> tuple[int, int, int]:
        handle, nv = self._handle(index), self._nv
        return (
            int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)),
            int(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_MEM)),
            int(nv.nvmlDeviceGetMaxClockInfo(handle, nv.NVML_CLOCK_SM)),
        )

    def throttle_reasons(self, index: int) -> int:
        return int(self._nv.nvmlDeviceGetCurrentClocksThrottleReasons(self._handle(index)))

    def ecc_uncorrected(self, index: int) -> int:
        nv = self._nv
        return int(
            nv.nvmlDeviceGetTotalEccErrors(
                self._handle(index), nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            )
        )

    def pcie(self, index: int) -> tuple[int, int, int, int]:
        handle, nv = self._handle(index), self._nv
        return (
            int(nv.nvmlDeviceGetCurrPcieLinkGeneration(handle)),
            int(nv.nvmlDeviceGetCurrPcieLinkWidth(handle)),
            int(nv.nvmlDeviceGetMaxPcieLinkGeneration(handle)),
            int(nv.nvmlDeviceGetMaxPcieLinkWidth(handle)),
        )

    def nvlinks_active(self, index: int) -> int:
        handle, nv = self._handle(index), self._nv
        up = 0
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                up += int(nv.nvmlDeviceGetNvLinkState(handle, link) == nv.NVML_FEATURE_ENABLED)
            except nv.NVMLError:
                continue  # not supported, or no such link on this device
        return up

    def processes(self, index: int) -> list[tuple[int, int | None]]:
        found = self._nv.nvmlDeviceGetComputeRunningProcesses(self._handle(index))
        return [(int(p.pid), _used(p.usedGpuMemory)) for p in found]

    def compute_capability(self, index: int) -> tuple[int, int]:
        major, minor = self._nv.nvmlDeviceGetCudaComputeCapability(self._handle(index))
        return int(major), int(minor)


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _used(value: Any) -> int | None:
    # NVML reports "not available" as a huge sentinel (NVML_VALUE_NOT_AVAILABLE) or None.
    if value is None or value >= (1 << 63):
        return None
    return int(value)


def read_once(read: Callable[[NvmlLibrary], T]) -> T | None:
    """``read`` on a freshly initialised NVML, shut down after; None without nvidia-ml-py, a
    driver, or when a query fails (a CPU host, a reading NVML will not give)."""
    nvml = default_library()
    if nvml is None:
        return None
    try:
        nvml.init()
    except Exception:  # no driver: a CPU host
        return None
    try:
        return read(nvml)
    except Exception:
        return None
    finally:
        with contextlib.suppress(Exception):
            nvml.shutdown()


def default_library() -> NvmlLibrary | None:
    """The real NVML library wrapper; None when nvidia-ml-py is not installed."""
    try:
        return PynvmlLibrary()
    except ImportError:
        return None
