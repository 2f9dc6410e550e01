"""Host readings (psutil) and the periodic ``HardwareSnapshot`` (host + NVML).

``HardwareProbe.read()`` is blocking (NVML calls can take tens of ms; disk usage can hang
on a dead network mount): callers on an event loop run it with ``asyncio.to_thread``.
It keeps ``psutil.Process`` objects between readings so CPU percentages are real rates
since the previous reading. Torch-free; never raises for a missing reading.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from engine.doctor.nvml_probe import NvmlLibrary, probe_gpus
from engine.hardware_report import DiskReport, HardwareSnapshot, HostReport, ProcessReport


def _reason(err: BaseException) -> str:
    return f"{type(err).__name__}: {err}"


def probe_disk(label: str, path: Path) -> DiskReport:
    """Free space where ``path`` is (its nearest existing parent, if it is not there yet)."""
    where = path
    while not where.exists() and where != where.parent:
        where = where.parent
    try:
        usage = shutil.disk_usage(where)
    except OSError as err:
        return DiskReport(label=label, path=str(path), unavailable=_reason(err))
    return DiskReport(label=label, path=str(path), free_bytes=usage.free, total_bytes=usage.total)


class HardwareProbe:
    """Reads the machine: GPUs through ``nvml``, host and the given processes through psutil."""

    def __init__(
        self,
        nvml: NvmlLibrary | None,
        disks: dict[str, Path] | None = None,
        processes: Callable[[], dict[str, int]] | None = None,
    ) -> None:
        self.nvml = nvml
        self.disks = dict(disks or {})
        """label -> directory whose free space is reported."""
        self.processes = processes or (lambda: {"supervisor": os.getpid()})
        """Called at each reading: role -> pid of the engine's own processes."""
        self._procs: dict[int, Any] = {}  # pid -> psutil.Process, kept for CPU rates

    def read(self) -> HardwareSnapshot:
        roles = self.processes()
        gpus, why = probe_gpus(self.nvml, frozenset(roles.values()))
        return HardwareSnapshot(ts=time.time(), nvml=why, gpus=gpus, host=self.host(roles))

    def host(self, roles: dict[str, int]) -> HostReport:
        gone: dict[str, str] = {}
        fields: dict[str, Any] = {}
        try:
            import psutil
        except ImportError as err:
            return HostReport(unavailable={"psutil": _reason(err)})
        for name, read in (
            ("cpu_count", lambda: psutil.cpu_count()),
            ("load_1m", lambda: os.getloadavg()[0]),
            ("cpu_pct", lambda: psutil.cpu_percent(interval=None)),
        ):
            try:
                fields[name] = read()
            except Exception as err:
                gone[name] = _reason(err)
        try:
            ram = psutil.virtual_memory()
            fields["ram_total"], fields["ram_available"] = ram.total, ram.available
            swap = psutil.swap_memory()
            fields["swap_total"], fields["swap_used"] = swap.total, swap.used
        except Exception as err:
            gone["ram_total"] = gone["ram_available"] = _reason(err)
        disks = [probe_disk(label, path) for label, path in self.disks.items()]
        return HostReport(**fields, disks=disks, processes=self._own(psutil, roles), unavailable=gone)

    def _own(self, psutil: Any, roles: dict[str, int]) -> list[ProcessReport]:
        reports = []
        live = set(roles.values())
        self._procs = {pid: p for pid, p in self._procs.items() if pid in live}
        for role, pid in roles.items():
            try:
                proc = self._procs.get(pid)
                first = proc is None
                if proc is None:
                    proc = self._procs[pid] = psutil.Process(pid)
                cpu = proc.cpu_percent(interval=None)  # since the previous call; 0.0 the first time
                reports.append(
                    ProcessReport(
                        role=role, pid=pid, cpu_pct=None if first else cpu, rss_bytes=proc.memory_info().rss
                    )
                )
            except Exception:  # gone between listing and reading: skip it
                self._procs.pop(pid, None)
        return reports
