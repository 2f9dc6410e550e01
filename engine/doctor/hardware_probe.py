"""Host readings (psutil) and the periodic ``HardwareSnapshot`` (host + NVML).

``HardwareProbe.read()`` is blocking (NVML calls can take tens of ms; disk usage can hang
on a dead network mount): callers on an event loop run it with ``asyncio.to_thread``.
It keeps ``psutil.Process`` objects and the host's CPU times between readings, so every CPU
percentage is a real rate since its previous reading (and none on the first). Torch-free;
never raises for a missing reading.
"""

from __future__ import annotations

import os
import platform
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
        self._cpu_times: Any = None  # the host's psutil.cpu_times() at the previous reading

    def read(self) -> HardwareSnapshot:
        roles = self.processes()
        gpus, why = probe_gpus(self.nvml, frozenset(roles.values()))
        return HardwareSnapshot(ts=time.time(), nvml=why, gpus=gpus, host=self.host(roles))

    def host(self, roles: dict[str, int]) -> HostReport:
        gone: dict[str, str] = {}
        fields: dict[str, Any] = {"kernel": platform.release() or None}
        try:
            import psutil
        except ImportError as err:
            return HostReport(unavailable={"psutil": _reason(err)})
        for name, read in (
            ("cpu_count", lambda: psutil.cpu_count()),
            ("load_1m", lambda: os.getloadavg()[0]),
            ("cpu_pct", lambda: self._host_busy(psutil.cpu_times())),
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

    def _host_busy(self, now: Any) -> float | None:
        """Percent of all cores busy since the previous reading; None at the first.

        Not ``psutil.cpu_percent(interval=None)``: it keeps its previous reading per calling
        thread, and ``read`` runs in ``asyncio.to_thread``'s pool, whose threads take turns, so
        it said 0.0 on a thread's first call and otherwise a rate over whatever window that
        thread had last read."""
        before, self._cpu_times = self._cpu_times, now
        if before is None:
            return None
        (total_now, idle_now), (total_then, idle_then) = _total_and_idle(now), _total_and_idle(before)
        span = total_now - total_then  # CPU seconds of all cores between the two readings
        if span <= 0:  # no time between them, or two threads' readings crossed
            return None
        return round(100.0 * (1.0 - (idle_now - idle_then) / span), 1)

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


def _total_and_idle(times: Any) -> tuple[float, float]:
    """(all CPU seconds, idle ones) of a ``psutil.cpu_times()``, as psutil counts them: on
    Linux guest time is already in user time, and iowait is idle."""
    total = sum(times) - getattr(times, "guest", 0.0) - getattr(times, "guest_nice", 0.0)
    return total, times.idle + getattr(times, "iowait", 0.0)
