"""The top bar: which run, its state, progress, time, and how fresh the data is; and, in
every layout, what the environment lacks (no GPU, the doctor's verdict when not healthy)."""

from __future__ import annotations

from textual.markup import escape

from engine.domain import Event
from engine.events import DoctorReported, RunPaused, TrainerRestarted
from engine.hardware_report import HardwareSnapshot
from memtui.console.alert_state import critical_banner, warning_banner
from memtui.console.run_view import RunView
from memtui.console.widgets.lines_view import LinesView
from memtui.formatting import format_age, format_duration, format_percent

STATE_STYLES: dict[str, str] = {
    "running": "$text-success",
    "completed": "$text-success",
    "starting": "$text-primary",
    "paused": "b reverse $text-accent",  # a held run must not read like a running one
    "restarting": "$text-warning",
    "stopping": "$text-warning",
    "stopped": "$text-muted",
    "failed": "$text-error",
    "interrupted": "$text-error",
}
CONNECTION_LABELS: dict[str, tuple[str, str]] = {
    "connected": ("● live", "$text-success"),
    "connecting": ("◌ connecting", "$text-warning"),
    "disconnected": ("○ disconnected", "$text-error"),
    "history": ("◆ history (read-only)", "$text-muted"),
}
STALE_AFTER_S = 10.0
"""Data older than this while connected is flagged: the trainer may be stuck (not while
paused: a held trainer sends no steps)."""
NO_GPU_FINDING = "no GPU"
"""How the doctor's no-GPU finding begins (``engine.doctor.findings.NO_GPU``): the no-GPU
note says it already."""


def render_header(
    view: RunView, now: float, *, frozen: bool = False, readonly: bool = False, doctor: Event | None = None
) -> str:
    """Two lines of content markup. ``doctor``: the newest ``doctor_report`` event.

    What the environment lacks rides on lines every layout shows (the compact one hides the
    hardware panel): no GPU after the connection, the doctor's verdict after the progress.
    """
    return (
        f"{_identity_line(view, now, frozen, readonly)}{_with_gap(gpu_note(view.hardware))}\n"
        f"{_progress_line(view, now)}{_with_gap(doctor_note(doctor))}"
    )


def _with_gap(note: str) -> str:
    return f"  {note}" if note else ""


def gpu_note(hardware: HardwareSnapshot | None) -> str:
    """``⚠ no GPU: CPU training (NVML: …)`` when the newest reading has no GPU; else empty.

    The hardware panel says it at length; the memory panel names the CPU stand-ins.
    """
    if hardware is None or hardware.gpus:
        return ""
    why = (hardware.nvml or "NVML found no devices").removeprefix("NVML: ")
    why = why if why.startswith("NVML") else f"NVML: {why}"  # "NVML: NVML Shared..." says it twice
    return f"[$text-warning]⚠ no GPU: CPU training[/] [$text-muted]({escape(why)})[/]"


def doctor_note(doctor: Event | None) -> str:
    """``doctor: degraded — <worst reason> (+N)``; empty when healthy or not known yet. The
    no-GPU reason is left to ``gpu_note`` (said once, not twice)."""
    report = DoctorReported.of(doctor) if doctor is not None else None
    if report is None or report.verdict not in ("degraded", "unhealthy"):
        return ""
    verdict = report.verdict
    reasons = [
        f.message for f in report.findings if f.level != "info" and not f.message.startswith(NO_GPU_FINDING)
    ]
    if not reasons:
        return ""
    style = "$text-error" if verdict == "unhealthy" else "$text-warning"
    more = f" (+{len(reasons) - 1})" if len(reasons) > 1 else ""
    return f"[{style}]doctor: {verdict} — {escape(reasons[0])}{more}[/]"


def _identity_line(view: RunView, now: float, frozen: bool, readonly: bool) -> str:
    state_style = STATE_STYLES.get(view.state, "$text")
    label, conn_style = CONNECTION_LABELS[view.connection]
    flags = ("  [reverse $text-warning] FROZEN [/]" if frozen else "") + (
        "  [$text-muted]read-only[/]" if readonly and view.connection != "history" else ""
    )
    if view.critical_alerts and not view.finished:  # until a "resolved" alert of each rule
        flags += f"  [reverse $text-error] {escape(critical_banner(view.critical_alerts))} [/]"
    if view.warning_alerts and not view.finished:  # likewise: a toast alone is gone too soon
        flags += f"  [$text-warning]⚠ {escape(warning_banner(view.warning_alerts))}[/]"
    state = f" {view.state} " if view.state == "paused" else view.state  # a badge, padded
    return (
        f"[b]{escape(view.run_id or 'no run')}[/b]  [{state_style}]{state}[/]{_restart_note(view)}"
        f"{_paused_note(view, now)}  [{conn_style}]{label}[/]{flags}"
    )


def _paused_note(view: RunView, now: float) -> str:
    """While paused: for how long, from the newest ``run_paused`` event (when still in view)."""
    if view.state != "paused":
        return ""
    since = next((e.ts for e in reversed(view.events) if e.type == RunPaused.event_type), None)
    return "" if since is None else f" [$text-accent]for {format_duration(max(0.0, now - since))}[/]"


def _restart_note(view: RunView) -> str:
    """While restarting: why, and the checkpoint it should resume from (not verified yet);
    afterwards: how many restarts so far and what the newest one really cost."""
    event = view.last_restart
    whole = view.whole_tree_resumes  # restarts across supervisor lives count too
    if event is None and not whole:
        return ""
    if view.state == "restarting" and event is not None:
        restarted = TrainerRestarted.of(event)
        if restarted is None:
            return " [$text-warning](trainer exited)[/]"
        return f" [$text-warning]({escape(restarted.cause)}; {_candidate(restarted)})[/]"
    count = view.restarts + whole
    resumed = view.last_resume
    cost = f", {whole} after the whole tree died" if whole else ""
    if event is not None and resumed is not None and resumed.attempt > (event.attempt or 0):  # this restart's
        cost += f", resumed at step {resumed.resume_step}, {resumed.steps_lost} steps lost"
    return f"  [$text-warning]↻ {count} restart{'s' if count != 1 else ''}{cost}[/]"


def _candidate(restarted: TrainerRestarted) -> str:
    """Where a restart should resume: a store written by older memtui says ``resume_step``."""
    step = restarted.candidate_step if restarted.candidate_step is not None else restarted.resume_step
    return f"checkpoint step {step} if it verifies" if step else "from the start"


def _progress_line(view: RunView, now: float) -> str:
    target = f"/{view.target_steps}" if view.target_steps else ""
    age = view.data_age_s(now)
    stale = view.connection == "connected" and view.state != "paused" and (age or 0.0) > STALE_AFTER_S
    age_style = "$text-warning" if stale else "$text-muted"
    clock = (  # an ended run's clock stops
        f"ran {format_duration(view.ran_s())}"
        if view.finished
        else f"elapsed {format_duration(view.elapsed_s(now))}  ETA {format_duration(view.eta_s())}"
    )
    return (
        f"step [b]{view.step}[/b]{target} ({format_percent(view.progress)})"
        f"{_startup_note(view, now)}  {clock}"
        f"  [{age_style}]data {format_age(age)}[/]"
    )


def _startup_note(view: RunView, now: float) -> str:
    """Before the first step: what the trainer is doing and for how long it has been at it."""
    phase, event = view.startup_phase, view.startup
    if phase is None or event is None:
        return ""
    # the time first: a narrow header cuts the line's end
    return f"  [$text-primary]⧗ {format_duration(max(0.0, now - event.ts))} {escape(phase.label())}[/]"


class RunHeader(LinesView):
    """Run id, state, connection, step/target, elapsed, ETA, age of the newest data."""

    DEFAULT_CSS = """
    RunHeader {
        height: 2;
        padding: 0 1;
        background: $panel;
        text-wrap: nowrap;  /* a long line is cut, never wrapped over the second one */
        text-overflow: ellipsis;
    }
    """

    frozen = False
    """The display is paused (data still arrives)."""
    readonly = False
    _shown = ""
    _doctor: Event | None = None
    """The newest doctor report seen: kept after chatty events push it out of ``view.events``."""

    def show(self, view: RunView, now: float) -> None:
        self._doctor = newest_doctor_report(view.events, self._doctor)
        content = render_header(view, now, frozen=self.frozen, readonly=self.readonly, doctor=self._doctor)
        if content != self._shown:
            self._shown = content
            self.update(content, layout=False)


def newest_doctor_report(events: tuple[Event, ...], held: Event | None) -> Event | None:
    """The newest ``doctor_report`` in ``events``, or ``held`` when that is newer."""
    found = next((e for e in reversed(events) if e.type == DoctorReported.event_type), None)
    if found is None or (held is not None and held.seq >= found.seq):
        return held
    return found
