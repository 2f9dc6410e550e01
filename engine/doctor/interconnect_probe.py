"""The interconnect a multi-node run depends on, read where this host can see it.

- InfiniBand (and RoCE) ports from sysfs (``/sys/class/infiniband/DEV/ports/N/{state,
  phys_state,rate,link_layer}``): no driver library, no root. A host without the directory
  is "not checked", with the reason, never an error.
- The environment variables NCCL (and gloo, and torch.distributed) read, as they are in force
  for a run started from this shell.
- The rendezvous endpoint (``host:port``, torchrun's c10d store on node 0): a TCP connect with
  a short timeout. Nothing listens there until node 0's run has started, so "refused" before a
  start is expected on node 0 and a finding says so.

Blocking (sysfs reads, a connect of at most ``CONNECT_TIMEOUT_S``); torch-free.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Mapping
from pathlib import Path

from engine.hardware_report import IbPort, InterconnectReport, RendezvousCheck

SYSFS_INFINIBAND = Path("/sys/class/infiniband")
CONNECT_TIMEOUT_S = 2.0
"""Seconds to wait for the rendezvous endpoint to accept a TCP connection."""
ENV_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "UCX_")
ENV_NAMES = ("MASTER_ADDR", "MASTER_PORT", "CUDA_VISIBLE_DEVICES")


def read_interconnect(
    rdzv_endpoint: str | None = None,
    *,
    sysfs: Path = SYSFS_INFINIBAND,
    environ: Mapping[str, str] | None = None,
) -> InterconnectReport:
    """InfiniBand ports, the distributed environment, and the endpoint when one is given."""
    gone: dict[str, str] = {}
    ports = read_infiniband(sysfs, gone)
    if rdzv_endpoint is None:
        gone["rendezvous"] = "no rendezvous endpoint given (memtui doctor --rdzv-endpoint HOST:PORT)"
    return InterconnectReport(
        infiniband=ports,
        nccl_env=distributed_environment(os.environ if environ is None else environ),
        rendezvous=None if rdzv_endpoint is None else check_rendezvous(rdzv_endpoint),
        unavailable=gone,
    )


def read_infiniband(sysfs: Path, gone: dict[str, str]) -> list[IbPort] | None:
    """Every port of every device under ``sysfs``; None (and the reason in ``gone``) when
    the directory does not exist or cannot be read."""
    try:
        devices = sorted(p for p in sysfs.iterdir() if p.is_dir())
    except FileNotFoundError:
        gone["infiniband"] = f"{sysfs} does not exist: no InfiniBand/RoCE driver loaded on this host"
        return None
    except OSError as err:
        gone["infiniband"] = f"{sysfs}: {err.strerror}"
        return None
    ports: list[IbPort] = []
    for device in devices:
        port_dirs = sorted((device / "ports").glob("*"), key=lambda p: (len(p.name), p.name))
        for port in port_dirs:
            if port.name.isdigit():
                ports.append(_port(device.name, port))
    return ports


def _port(device: str, path: Path) -> IbPort:
    return IbPort(
        device=device,
        port=int(path.name),
        state=_sysfs_value(path / "state", numbered=True),
        phys_state=_sysfs_value(path / "phys_state", numbered=True),
        rate=_sysfs_value(path / "rate"),
        link_layer=_sysfs_value(path / "link_layer"),
    )


def _sysfs_value(path: Path, *, numbered: bool = False) -> str | None:
    """A sysfs attribute's text; ``4: ACTIVE`` -> ``ACTIVE`` when ``numbered``."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None
    if numbered and ":" in text:
        text = text.split(":", 1)[1].strip()
    return text or None


def distributed_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables NCCL, gloo and torch.distributed read, sorted by name."""
    return {
        name: value
        for name, value in sorted(environ.items())
        if name.startswith(ENV_PREFIXES) or name in ENV_NAMES
    }


def check_rendezvous(endpoint: str, timeout_s: float = CONNECT_TIMEOUT_S) -> RendezvousCheck:
    """Open (and close) a TCP connection to ``host:port``."""
    host, sep, port_text = endpoint.rpartition(":")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        return RendezvousCheck(endpoint=endpoint, reachable=False, detail="not HOST:PORT")
    started = time.perf_counter()
    try:
        with socket.create_connection((host.strip("[]"), int(port_text)), timeout=timeout_s):
            pass
    except socket.gaierror as err:
        return RendezvousCheck(
            endpoint=endpoint, reachable=False, detail=f"name not resolved: {err.strerror}"
        )
    except TimeoutError:
        return RendezvousCheck(endpoint=endpoint, reachable=False, detail=f"no answer within {timeout_s:g} s")
    except OSError as err:
        return RendezvousCheck(endpoint=endpoint, reachable=False, detail=(err.strerror or str(err)).lower())
    elapsed_ms = (time.perf_counter() - started) * 1000
    return RendezvousCheck(endpoint=endpoint, reachable=True, detail=f"connected in {elapsed_ms:.1f} ms")
