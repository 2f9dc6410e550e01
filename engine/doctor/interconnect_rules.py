"""The doctor's rules for the interconnect: readings in, findings out. Pure.

A port that is not ACTIVE, NCCL told to ignore an active InfiniBand port, or a rendezvous
endpoint that does not answer make the verdict degraded (a single-node run does not need
them, and on node 0 the endpoint answers only once its run has started); everything else is
information, and what could not be checked says "not checked" with the reason.
"""

from __future__ import annotations

from engine.hardware_report import Finding, IbPort, InterconnectReport


def interconnect_findings(report: InterconnectReport) -> list[Finding]:
    return _infiniband(report) + _nccl(report) + _rendezvous(report)


def _infiniband(report: InterconnectReport) -> list[Finding]:
    ports = report.infiniband
    if ports is None:
        why = report.unavailable.get("infiniband", "unknown")
        return [Finding(level="info", message=f"InfiniBand: not checked ({why})")]
    if not ports:
        return [Finding(level="info", message="InfiniBand: no devices (multi-node traffic goes over TCP)")]
    out = []
    for port in ports:
        if port.state == "ACTIVE":
            out.append(Finding(level="info", message=f"InfiniBand {_name(port)} ACTIVE{_details(port)}"))
        else:
            out.append(
                Finding(
                    level="degraded",
                    message=f"InfiniBand {_name(port)} is {port.state or 'in an unknown state'} "
                    f"(physical {port.phys_state or '?'}): NCCL cannot use it",
                )
            )
    active = any(p.state == "ACTIVE" for p in ports)
    if active and report.nccl_env.get("NCCL_IB_DISABLE", "0") not in ("", "0"):
        out.append(
            Finding(
                level="degraded", message="NCCL_IB_DISABLE is set: NCCL ignores the active InfiniBand port(s)"
            )
        )
    return out


def _nccl(report: InterconnectReport) -> list[Finding]:
    if not report.nccl_env:
        return [Finding(level="info", message="NCCL/gloo environment: nothing set (their defaults)")]
    settings = ", ".join(f"{k}={v}" for k, v in report.nccl_env.items())
    return [Finding(level="info", message=f"NCCL/gloo environment in force: {settings}")]


def _rendezvous(report: InterconnectReport) -> list[Finding]:
    check = report.rendezvous
    if check is None:
        why = report.unavailable.get("rendezvous", "no endpoint given")
        return [Finding(level="info", message=f"rendezvous: not checked ({why})")]
    if check.reachable:
        return [Finding(level="info", message=f"rendezvous {check.endpoint} reachable ({check.detail})")]
    return [
        Finding(
            level="degraded",
            message=f"rendezvous {check.endpoint} not reachable ({check.detail}): on node 0 nothing "
            "listens before its run starts; from another node check the address, port and firewall",
        )
    ]


def _name(port: IbPort) -> str:
    return f"{port.device} port {port.port}"


def _details(port: IbPort) -> str:
    parts = [p for p in (port.rate, port.link_layer and f"link {port.link_layer}") if p]
    return f", {', '.join(parts)}" if parts else ""
