"""The environment's health as the directive policy reads it.

``health_problems`` turns the newest doctor report and the alerts still firing into the
problem strings ``PolicyContext.problems`` carries; any problem makes the policy reject
every directive ("environment unhealthy: ..."). The rule:

- doctor ``unhealthy``: each unhealthy finding blocks;
- doctor ``degraded`` alone does not block (a CPU run is "degraded: no GPU"), except that
  no GPU blocks when the run requires an accelerator (``PolicyConfig.require_accelerator``:
  true, or unset on a run whose doctor has found a GPU, i.e. a GPU run; when true, no
  doctor report yet blocks too: zero trust until the doctor has looked). These
  accelerator problems are also ``blockers``: the policy then rejects every directive,
  remedies included (MEM v3: reject when no CUDA device is available);
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


def accelerator_problems(report: DoctorReport | None, require_accelerator: bool = False) -> list[str]:
    """Why a run that requires a GPU has none now (empty: it has one, or needs none)."""
    if not require_accelerator:
        return []
    if report is None:
        return ["accelerator required: no doctor report yet"]
    return [] if report.hardware.gpus else ["accelerator required but the doctor finds no GPU"]


def doctor_problems(report: DoctorReport | None, require_accelerator: bool = False) -> list[str]:
    """What in the doctor's newest report blocks directives."""
    out = [f"doctor: {f.message}" for f in report.findings if f.level == "unhealthy"] if report else []
    return out + accelerator_problems(report, require_accelerator)


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
    gpu_seen: bool = False
    """A doctor report of this run has found a GPU: the run's device is a GPU."""

    def observe(self, event: Event) -> bool:
        """Take an ``alert`` or ``doctor_report`` event; True if it was one (an unreadable
        one changes nothing)."""
        reported = DoctorReported.of(event)
        if reported is not None:
            self.report = reported.report()
            self.gpu_seen = self.gpu_seen or bool(self.report.hardware.gpus)
            return True
        alert = AlertRaised.of(event)
        if alert is None:
            return False
        if alert.resolved:
            self.active.pop(alert.rule, None)
        elif alert.rule not in INSTANT_RULES:  # a restart is an instant, never a standing state
            self.active[alert.rule] = event.message
        return True

    def requires_accelerator(self, configured: bool | None) -> bool:
        """``policy.require_accelerator``: as configured, or when unset, on for a GPU run."""
        return self.gpu_seen if configured is None else configured

    def problems(self, require_accelerator: bool | None = False) -> tuple[str, ...]:
        return health_problems(self.report, self.active, self.requires_accelerator(require_accelerator))

    def blockers(self, require_accelerator: bool | None = False) -> tuple[str, ...]:
        """Problems under which no directive passes, remedies included."""
        return tuple(accelerator_problems(self.report, self.requires_accelerator(require_accelerator)))
