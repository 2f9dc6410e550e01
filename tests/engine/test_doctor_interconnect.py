"""The doctor's interconnect checks: InfiniBand ports from a sysfs tree, the NCCL
environment, and a real TCP connect to the rendezvous endpoint (no torch)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from engine.doctor.examiner import EnvironmentDoctor
from engine.doctor.findings import verdict_of
from engine.doctor.interconnect_probe import check_rendezvous, distributed_environment, read_interconnect
from engine.doctor.interconnect_rules import interconnect_findings
from engine.doctor.report_text import render_report


def fake_sysfs(root: Path, ports: dict[str, dict[int, tuple[str, str]]]) -> Path:
    """``root/DEV/ports/N/{state,phys_state,rate,link_layer}`` as the kernel writes them."""
    for device, by_port in ports.items():
        for port, (state, phys) in by_port.items():
            where = root / device / "ports" / str(port)
            where.mkdir(parents=True)
            (where / "state").write_text(state + "\n")
            (where / "phys_state").write_text(phys + "\n")
            (where / "rate").write_text("200 Gb/sec (4X HDR)\n")
            (where / "link_layer").write_text("InfiniBand\n")
    return root


def test_ports_are_read_and_a_down_port_degrades(tmp_path: Path) -> None:
    sysfs = fake_sysfs(
        tmp_path / "ib",
        {"mlx5_0": {1: ("4: ACTIVE", "5: LinkUp")}, "mlx5_1": {1: ("1: DOWN", "3: Disabled")}},
    )
    report = read_interconnect(None, sysfs=sysfs, environ={})
    assert [(p.device, p.port, p.state, p.phys_state) for p in report.infiniband or []] == [
        ("mlx5_0", 1, "ACTIVE", "LinkUp"),
        ("mlx5_1", 1, "DOWN", "Disabled"),
    ]
    findings = interconnect_findings(report)
    messages = [f.message for f in findings]
    assert "InfiniBand mlx5_0 port 1 ACTIVE, 200 Gb/sec (4X HDR), link InfiniBand" in messages
    assert any(
        f.level == "degraded" and "mlx5_1 port 1 is DOWN (physical Disabled)" in f.message for f in findings
    )
    assert verdict_of(findings) == "degraded"
    assert any("rendezvous: not checked" in m for m in messages)


def test_no_sysfs_directory_is_not_checked_with_the_reason(tmp_path: Path) -> None:
    report = read_interconnect(None, sysfs=tmp_path / "absent", environ={})
    assert report.infiniband is None and "does not exist" in report.unavailable["infiniband"]
    findings = interconnect_findings(report)
    assert verdict_of(findings) == "healthy"
    assert findings[0].message.startswith("InfiniBand: not checked (")


def test_nccl_ib_disable_with_an_active_port_degrades(tmp_path: Path) -> None:
    sysfs = fake_sysfs(tmp_path / "ib", {"mlx5_0": {1: ("4: ACTIVE", "5: LinkUp")}})
    env = {"NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0", "HOME": "/root", "MASTER_PORT": "29500"}
    report = read_interconnect(None, sysfs=sysfs, environ=env)
    assert report.nccl_env == {"MASTER_PORT": "29500", "NCCL_IB_DISABLE": "1", "NCCL_SOCKET_IFNAME": "eth0"}
    findings = interconnect_findings(report)
    assert any(f.level == "degraded" and "NCCL_IB_DISABLE" in f.message for f in findings)


def test_distributed_environment_keeps_only_what_nccl_and_torch_read() -> None:
    env = {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "lo", "TORCH_NCCL_BLOCKING_WAIT": "1", "PATH": "/bin"}
    assert list(distributed_environment(env)) == [
        "GLOO_SOCKET_IFNAME",
        "NCCL_DEBUG",
        "TORCH_NCCL_BLOCKING_WAIT",
    ]


def test_rendezvous_reachable_refused_and_malformed() -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        reachable = check_rendezvous(f"127.0.0.1:{port}")
    assert reachable.reachable and reachable.detail.startswith("connected in")
    refused = check_rendezvous(f"127.0.0.1:{port}")  # closed now
    assert not refused.reachable and "refused" in refused.detail
    assert check_rendezvous("no-port-here").detail == "not HOST:PORT"
    assert check_rendezvous("host:99999").detail == "not HOST:PORT"


def test_unreachable_endpoint_degrades_and_says_why(tmp_path: Path) -> None:
    report = read_interconnect("127.0.0.1:1", sysfs=tmp_path / "absent", environ={})
    (finding,) = [f for f in interconnect_findings(report) if "rendezvous" in f.message]
    assert finding.level == "degraded" and "127.0.0.1:1 not reachable" in finding.message
    assert "nothing listens before its run starts" in finding.message


def test_the_doctor_reports_the_interconnect_only_when_asked(tmp_path: Path) -> None:
    plain = EnvironmentDoctor(nvml=None, run_dir=tmp_path).examine()
    assert plain.interconnect is None  # the supervisor's periodic doctor: one host, no noise
    asked = EnvironmentDoctor(nvml=None, run_dir=tmp_path, rdzv_endpoint="127.0.0.1:1").examine()
    assert asked.interconnect is not None and asked.interconnect.rendezvous is not None
    assert "rendezvous 127.0.0.1:1: NOT reachable" in render_report(asked)


@pytest.mark.slow
def test_memtui_doctor_checks_the_endpoint_from_the_shell(tmp_path: Path) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        endpoint = f"127.0.0.1:{server.getsockname()[1]}"
        done = subprocess.run(
            [str(Path(sys.executable).with_name("memtui")), "doctor", "--json", "--rdzv-endpoint", endpoint],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "MEMTUI_HOME": str(tmp_path)},
        )
    assert done.returncode in (0, 1), done.stderr
    report = json.loads(done.stdout)
    assert report["interconnect"]["rendezvous"]["reachable"] is True
    assert report["interconnect"]["rendezvous"]["endpoint"] == endpoint
