"""The environment's health as the directive policy reads it.

``health_problems`` turns the newest doctor report and the alerts still firing into the
problem strings ``PolicyContext.problems`` carries; any problem makes the policy reject
every directive ("environment unhealthy: ..."). The rule:

- doctor ``unhealthy``: each unhealthy finding blocks;
- doctor ``degraded`` alone does not block (a CPU run is "degraded: no GPU"), except that
  no GPU blocks when the run requires an accelerator (``PolicyConfig.require_accelerator``;
  then no doctor report yet blocks too: zero trust until the doctor has looked);
- a firing alert blocks when it says the run or its machine is broken (``BLOCKING_RULES``:
  a stuck run, a NaN loss, GPU heat or throttling, a checkpoint disk too low, a store that
  cannot write: training is held). Alerts a
  directive is the remedy for (loss diverging, memory headroom, throughput) do not block.

``HealthBoard`` keeps the newest report and the alerts firing, fed from the supervisor's
``alert`` and ``doctor_report`` events. Pure and torch-free: no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from engine.domain import Event
from engine.events import INSTANT_RULES, AlertRaised, DoctorReported
from engine.hardware_report import DoctorReport

BLOCKING_RULES = ("heartbeat", "loss_nan", "gpu_temperature", "gpu_throttle", "disk_low", "storage")
"""Alert rules (before any ``.N`` GPU suffix) whose firing blocks directives."""


def blocks(rule: str) -> bool:
    """Whether a firing alert of ``rule`` (e.g. ``gpu_throttle.0``) blocks directives."""
    return rule.split(".", 1)[0] in BLOCKING_RULES


def doctor_problems(report: DoctorReport | None, require_accelerator: bool = False) -> list[str]:
    """What in the doctor's newest report blocks directives."""
    if report is None:
        return ["accelerator required: no doctor report yet"] if require_accelerator else []
    out = [f"doctor: {f.message}" for f in report.findings if f.level == "unhealthy"]
    if require_accelerator and not report.hardware.gpus:
        out.append("accelerator required but the doctor finds no GPU")
    return out


def health_problems(
    report: DoctorReport | None, active: Mapping[str, str], require_accelerator: bool = False
) -> tuple[str, ...]:
    """The problems for the policy: the doctor's, then each blocking alert's message
    (``active`` maps a firing alert's rule to its message), in a stable order."""
    alerts = [active[rule] for rule in sorted(active) if blocks(rule)]
    return tuple(doctor_problems(report, require_accelerator) + alerts)


@dataclass
class HealthBoard:
    """The newest doctor report and the alerts firing now, from the run's events."""

    report: DoctorReport | None = None
    active: dict[str, str] = field(default_factory=dict)
    """Firing alert rule -> its newest message."""

    def observe(self, event: Event) -> bool:
        """Take an ``alert`` or ``doctor_report`` event; True if it was one (an unreadable
        one changes nothing)."""
        reported = DoctorReported.of(event)
        if reported is not None:
            self.report = reported.report()
            return True
        alert = AlertRaised.of(event)
        if alert is None:
            return False
        if alert.resolved:
            self.active.pop(alert.rule, None)
        elif alert.rule not in INSTANT_RULES:  # a restart is an instant, never a standing state
            self.active[alert.rule] = event.message
        return True

    def problems(self, require_accelerator: bool = False) -> tuple[str, ...]:
        return health_problems(self.report, self.active, require_accelerator)
