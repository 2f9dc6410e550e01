"""What the doctor and the hardware probes report: serializable, torch-free models.

Every reading that could not be taken is ``None`` with its field name and the reason in
``unavailable`` (e.g. ``{"power_w": "NVML: Not Supported"}``): a missing reading is
information, never a crash.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Verdict = Literal["healthy", "degraded", "unhealthy"]
FindingLevel = Literal["info", "degraded", "unhealthy"]
SLOWING_THROTTLES = frozenset({"hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake"})
"""Throttle reasons that mean heat or power trouble (a software power cap at full load is normal)."""


class _Report(BaseModel):
    model_config = ConfigDict(extra="forbid")


class GpuProcess(_Report):
    """A process holding memory on a GPU."""

    pid: int
    used_bytes: int | None = None
    """Device memory it holds; None where the driver will not say (e.g. in a container)."""
    ours: bool | None = False
    """One of this run's processes (the trainer or its ranks); None: cannot be attributed
    (NVML reports pids of another pid namespace, as inside a container, where a pid
    here does not name the same process)."""


class GpuReport(_Report):
    """One GPU as NVML sees it."""

    index: int
    name: str | None = None
    memory_total: int | None = None
    """Bytes."""
    memory_used: int | None = None
    """Bytes used on the device by every process (NVML), not just our allocator."""
    utilization_pct: int | None = None
    """Percent of the last sample period a kernel ran."""
    temperature_c: int | None = None
    temperature_slowdown_c: int | None = None
    """Where the GPU starts slowing its clocks."""
    temperature_shutdown_c: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: int | None = None
    sm_clock_max_mhz: int | None = None
    memory_clock_mhz: int | None = None
    throttle_reasons: list[str] = Field(default_factory=list)
    """Active clock-throttle reasons that cost speed (idle and app settings left out)."""
    ecc_uncorrected: int | None = None
    """Volatile uncorrected ECC errors since the driver loaded."""
    pcie_gen: int | None = None
    pcie_width: int | None = None
    pcie_max_gen: int | None = None
    pcie_max_width: int | None = None
    compute_capability: str | None = None
    """CUDA compute capability, ``major.minor`` (``9.0``, ``12.0``)."""
    processes: list[GpuProcess] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)


class DiskReport(_Report):
    label: str
    """``run`` or ``checkpoints``."""
    path: str
    free_bytes: int | None = None
    total_bytes: int | None = None
    unavailable: str | None = None


class ProcessReport(_Report):
    """One of the engine's own processes."""

    role: str
    """``supervisor``, ``trainer``, ``rank N``, or ``doctor`` (a standalone ``memtui doctor``)."""
    pid: int
    cpu_pct: float | None = None
    """Percent of one core since the previous reading (None on the first)."""
    rss_bytes: int | None = None


class HostReport(_Report):
    kernel: str | None = None
    """The kernel's release (``platform.release()``): WSL2's says ``microsoft``."""
    cpu_count: int | None = None
    load_1m: float | None = None
    cpu_pct: float | None = None
    """Whole machine, percent of all cores."""
    ram_total: int | None = None
    ram_available: int | None = None
    swap_total: int | None = None
    swap_used: int | None = None
    disks: list[DiskReport] = Field(default_factory=list)
    processes: list[ProcessReport] = Field(default_factory=list)
    unavailable: dict[str, str] = Field(default_factory=dict)


class HardwareSnapshot(_Report):
    """The light, frequent reading: GPUs and host, no software survey."""

    ts: float
    nvml: str | None = None
    """Why NVML gave nothing (no driver, no library); None when it answered."""
    gpus: list[GpuReport] = Field(default_factory=list)
    host: HostReport = Field(default_factory=HostReport)


class SoftwareReport(_Report):
    python: str
    torch: str | None = None
    torch_cuda: str | None = None
    """CUDA version torch was built for; None for a CPU build."""
    driver: str | None = None
    """NVIDIA driver version."""
    driver_cuda: str | None = None
    """Newest CUDA version the driver supports, e.g. ``12.4``."""
    deepspeed: str | None = None
    deepspeed_accelerator: str | None = None
    """The accelerator DeepSpeed was installed for (``cuda``, ``cpu``)."""
    deepspeed_ops: dict[str, bool] = Field(default_factory=dict)
    """Op -> pre-built at install; ops not pre-built are JIT-compiled on first use."""
    deepspeed_compatible: dict[str, bool] = Field(default_factory=dict)
    """Op -> can be JIT-built here (``ds_report``'s "compatible"); empty unless the op check
    ran (``doctor --deep``; the supervisor once at start), else why in ``unavailable``."""
    deepspeed_op_notes: dict[str, str] = Field(default_factory=dict)
    """Op -> why it cannot be built here, in DeepSpeed's words (incompatible ops only)."""
    deepspeed_ninja: bool | None = None
    """ninja found (JIT builds need it); None unless the op check ran."""
    cxx_compiler: str | None = None
    """The C++ compiler a JIT build of a DeepSpeed op runs (``$CXX``, else ``c++``), its path;
    None when not on ``PATH``."""
    deepspeed_ops_required: list[str] = Field(default_factory=list)
    """Ops the run's optimizer needs; [] with memtui's default (torch's own AdamW)."""
    torch_arch_list: list[str] = Field(default_factory=list)
    """``torch.cuda.get_arch_list()``: the architectures torch's kernels are built for
    (``sm_90`` machine code, ``compute_90`` PTX); empty unless the op survey ran on CUDA."""
    accelerator: Literal["cuda", "cpu"] = "cpu"
    accelerator_count: int = 0
    unavailable: dict[str, str] = Field(default_factory=dict)


class IbPort(_Report):
    """One InfiniBand (or RoCE) port as ``/sys/class/infiniband/DEV/ports/N`` shows it."""

    device: str
    """e.g. ``mlx5_0``."""
    port: int
    state: str | None = None
    """``ACTIVE``, ``DOWN``, ``INIT``... (sysfs says ``4: ACTIVE``; the number is dropped)."""
    phys_state: str | None = None
    """``LinkUp``, ``Disabled``, ``Polling``..."""
    rate: str | None = None
    """e.g. ``200 Gb/sec (4X HDR)``."""
    link_layer: str | None = None
    """``InfiniBand`` or ``Ethernet`` (RoCE)."""


class RendezvousCheck(_Report):
    """Whether a TCP connection to the rendezvous endpoint (``host:port``) opened."""

    endpoint: str
    reachable: bool
    detail: str
    """What happened: ``connected in 1.2 ms``, ``connection refused``, ``name not known``..."""


class InterconnectReport(_Report):
    """What a multi-node run depends on, where this host can see it."""

    infiniband: list[IbPort] | None = None
    """Every port of every device; None when not checked (see ``unavailable``)."""
    nccl_env: dict[str, str] = Field(default_factory=dict)
    """The NCCL/gloo/torch.distributed environment variables in force."""
    rendezvous: RendezvousCheck | None = None
    """None when no endpoint was given."""
    unavailable: dict[str, str] = Field(default_factory=dict)
    """Reading -> why it was not checked (``infiniband``, ``rendezvous``)."""


class Finding(_Report):
    level: FindingLevel
    message: str


class DoctorReport(_Report):
    """``memtui doctor --json``; stored as the ``doctor_report`` event's data."""

    ts: float
    verdict: Verdict
    findings: list[Finding] = Field(default_factory=list)
    """Why the verdict is what it is, worst first."""
    software: SoftwareReport
    hardware: HardwareSnapshot
    interconnect: InterconnectReport | None = None
    """InfiniBand ports, NCCL settings, the rendezvous endpoint (None in older reports)."""

    @property
    def reasons(self) -> list[str]:
        return [f.message for f in self.findings if f.level != "info"]
