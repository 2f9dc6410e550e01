"""What the console shows about a run: a frozen snapshot folded from server messages.

``RunView`` is pure data. Each ``with_*`` method returns a new view, so the panels draw
from an immutable snapshot while the next one is being folded, and tests can drive it
with plain messages and a fixed ``now``.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

from engine.chaos.table import ChaosKindSpec
from engine.config.run_config import RunConfig
from engine.domain import (
    TERMINAL_STATES,
    Event,
    RankMemory,
    RunState,
    TelemetrySample,
    Thresholds,
    ThroughputFigures,
)
from engine.events import (
    CheckpointFailed,
    CheckpointRejected,
    CheckpointSaved,
    CheckpointSkipped,
    DirectiveDecided,
    DirectiveProposed,
    DoctorReported,
    EvalCompleted,
    MemoryAdapted,
    RunContinued,
    RunEnded,
    RunStarted,
    StartupPhase,
    StateChanged,
    TrainerExited,
    TrainerRestarted,
    TrainerResumed,
    TrainerStarted,
    nodes_met,
)
from engine.hardware_report import HardwareSnapshot
from engine.wire.protocol import DirectiveView, EventMessage, Hardware, ServerMessage, Telemetry, Welcome
from memtui.console.alert_state import KEPT_WITH_ALERTS, critical_after, warning_after
from memtui.console.series import (
    LIVE_POINTS,
    WINDOW_SECONDS,
    ChartWindow,
    Point,
    downsample,
    evals_after,
    point_of,
    within,
)

ViewConnection = Literal["connecting", "connected", "disconnected", "history"]
"""The client's connection states, plus ``history``: a finished run read from its store."""

MAX_EVENTS = 500
"""Newest events kept for the log; the store keeps them all."""
MAX_ALERTS = 1000
"""Newest alert events kept for the alert list."""
LOSS_EMA_ALPHA = 0.1
"""Weight of the newest loss in the smoothed loss (about a 10-step window)."""
DEFAULT_THRESHOLDS: Thresholds = RunConfig().thresholds()
"""The config models' defaults: the levels of a run that has not said its own (an older
supervisor, an unreadable run.json)."""
OVERFLOW_ALERT_WINDOW = 50
OVERFLOW_ALERT_COUNT = 3
"""This many overflows within the newest OVERFLOW_ALERT_WINDOW points raise an alert."""
CHECKPOINT_EVENTS = frozenset({CheckpointSaved.event_type, CheckpointRejected.event_type})
"""Events after which the run's checkpoint list has changed."""
SAVE_EVENTS = frozenset(m.event_type for m in (CheckpointSaved, CheckpointFailed, CheckpointSkipped))
"""How a save ended (one event per save)."""


@dataclass(frozen=True)
class RunView:
    """Everything the panels draw, as of one moment."""

    run_id: str = ""
    name: str = ""
    state: RunState = "starting"
    target_steps: int = 0
    started_at: float | None = None
    """Unix time the run was created (from run.json)."""
    connection: ViewConnection = "connecting"
    newest_data_at: float | None = None
    """Unix time the newest telemetry or event arrived."""
    sample: TelemetrySample | None = None
    """Newest step sample."""
    window_start: TelemetrySample | None = None
    """First sample of the current attempt (or since the last pause): averages are taken from it."""
    resumed: bool = False
    """Training continued after a pause: the next sample starts a new averaging window, so
    the time held counts in neither the average pace nor the ETA."""
    loss_smoothed: float | None = None
    loss_scale_min: float | None = None
    events: tuple[Event, ...] = ()
    last_seq: int = 0
    coalesced: int = 0
    """Telemetry samples the supervisor did not send us (the store has them)."""
    points: tuple[Point, ...] = ()
    """Newest samples as chart points (the live window), oldest first."""
    tokens_per_s_peak: float | None = None
    run_throughput: ThroughputFigures | None = None
    """Tokens/s over the whole run (every attempt, from the store), read every few seconds."""
    directives: tuple[DirectiveView, ...] = ()
    """Pending directives, oldest first."""
    window: ChartWindow = "live"
    """The throughput and memory charts' window."""
    window_points: tuple[Point, ...] | None = None
    """Downsampled store points for the hour/run windows; None until read."""
    last_adaptation: Event | None = None
    """The newest ``memory_adapted`` event."""
    last_restart: Event | None = None
    """The newest ``trainer_restarted`` event."""
    last_resume: TrainerResumed | None = None
    """Where the newest restart really resumed (``trainer_resumed``: after the trainer's load)."""
    restarts: int = 0
    """Trainer restarts by a supervisor so far (as the newest restart event counts them)."""
    whole_tree_resumes: int = 0
    """Trainers started again by a new supervisor after the old one died with its trainer (a
    whole-tree kill, a reboot, then ``memtui resume``): restarts too, across supervisor lives."""
    checkpoint_seq: int = 0
    """Seq of the newest checkpoint event: the checkpoint list changes with it."""
    last_save: Event | None = None
    """The newest save's ending: saved (with the training stall), failed or skipped."""
    hardware: HardwareSnapshot | None = None
    """Newest hardware reading (live ``hardware`` messages, or a stored doctor report's)."""
    hardware_sample: TelemetrySample | None = None
    """The step sample current when ``hardware`` arrived: the allocator's numbers shown
    beside NVML's, as of the same moment (and the panel redraws only per reading)."""
    critical_alerts: tuple[Event, ...] = ()
    """Critical ``alert`` events still firing (one per rule) until a resolved one arrives."""
    warning_alerts: tuple[Event, ...] = ()
    """Warning ``alert`` events still firing, likewise (instants such as a restart never)."""
    alerts: tuple[Event, ...] = ()
    """Every ``alert`` event (firing and resolved) and ``stacks_collected`` (where each rank
    was), oldest first, the newest MAX_ALERTS: kept apart from ``events`` so that chatty
    events never push an alert out."""
    ranks: tuple[RankMemory, ...] = ()
    """Every rank's memory as of the newest rank report (rank order); kept between the steps
    that carry one, empty for a single-rank run."""
    ranks_step: int | None = None
    """The step whose sample carried ``ranks``."""
    thresholds: Thresholds = DEFAULT_THRESHOLDS
    """The run's memory and loss-scale levels, as its supervisor's Welcome or its run.json
    said; the panels colour by them."""
    chaos: tuple[ChaosKindSpec, ...] = ()
    """The chaos kinds the run's supervisor performs (its Welcome): what the console offers."""
    startup: Event | None = None
    """The newest ``startup_phase`` of an attempt that has not stepped yet (nor exited): what
    the trainer is doing before its first step, and since when (the event's ts)."""
    started: TrainerStarted | None = None
    """The newest trainer's start: its MFU terms (where the peak came from) and what the
    plan predicted for its memory."""
    evals: tuple[EvalCompleted, ...] = ()
    """Evals in arrival order (the newest ``series.MAX_EVALS``): the eval line and chart."""

    # ------------------------------------------------------------------ folding

    def apply(self, message: ServerMessage, now: float) -> RunView:
        """Fold any server message; ones the view does not show return it unchanged."""
        if isinstance(message, Telemetry):
            return self.with_telemetry(message, now)
        if isinstance(message, EventMessage):
            return self.with_event(message.event, now)
        if isinstance(message, Welcome):
            return self.with_welcome(message)
        if isinstance(message, Hardware):
            return self.with_hardware(message.snapshot)
        return self

    def with_welcome(self, welcome: Welcome) -> RunView:
        """The supervisor's identity and state, the chaos kinds it performs, and its thresholds
        when it sends them (an older one does not: the ones already known stay)."""
        thresholds = welcome.thresholds or self.thresholds
        return dataclasses.replace(
            self,
            run_id=welcome.run_id,
            state=welcome.state,
            thresholds=thresholds,
            chaos=tuple(welcome.chaos),
        )

    def with_connection(self, connection: ViewConnection) -> RunView:
        return dataclasses.replace(self, connection=connection)

    def with_telemetry(self, message: Telemetry, now: float) -> RunView:
        view = self.with_sample(message.sample, now)
        return dataclasses.replace(view, state=message.state, coalesced=self.coalesced + message.coalesced)

    def with_sample(self, sample: TelemetrySample, now: float | None = None) -> RunView:
        if (
            self.sample is not None
            and sample.step <= self.sample.step
            and sample.attempt == self.sample.attempt
        ):
            return self  # stale or repeated
        restarted = self.window_start is None or sample.attempt != self.window_start.attempt or self.resumed
        ranks, ranks_step = _ranks_after(sample, self.ranks, self.ranks_step)
        return dataclasses.replace(
            self,
            sample=sample,
            ranks=ranks,
            ranks_step=ranks_step,
            window_start=sample if restarted else self.window_start,
            resumed=False,
            loss_smoothed=_ema(self.loss_smoothed, sample.loss),
            loss_scale_min=_min(self.loss_scale_min, sample.loss_scale),
            newest_data_at=now if now is not None else self.newest_data_at,
            points=(*self.points, point_of(sample))[-LIVE_POINTS:],
            tokens_per_s_peak=_max(self.tokens_per_s_peak, sample.tokens_per_s),
            startup=_startup_after_step(self.startup, sample),
        )

    def with_hardware(self, snapshot: HardwareSnapshot) -> RunView:
        """A newer hardware reading (an older or repeated one leaves the view as it is)."""
        if self.hardware is not None and snapshot.ts <= self.hardware.ts:
            return self
        return dataclasses.replace(self, hardware=snapshot, hardware_sample=self.sample)

    def with_run_throughput(self, figures: ThroughputFigures | None) -> RunView:
        """The store's run-wide figures as last read (an unreadable store keeps the last ones)."""
        if figures is None or figures == self.run_throughput:
            return self
        return dataclasses.replace(self, run_throughput=figures)

    def with_window(self, window: ChartWindow, points: tuple[Point, ...] | None = None) -> RunView:
        """Switch the chart window; ``points`` are the store's, read off the event loop."""
        return dataclasses.replace(self, window=window, window_points=points)

    def with_event(self, event: Event, now: float | None = None) -> RunView:
        if event.seq <= self.last_seq:
            return self  # already folded
        whole_tree = _after_whole_tree_death(event)
        return dataclasses.replace(
            self,
            events=(*self.events, event)[-MAX_EVENTS:],
            last_seq=event.seq,
            state=_state_after(event, self.state),
            newest_data_at=now if now is not None else self.newest_data_at,
            directives=_directives_after(event, self.directives),
            last_adaptation=event if event.type == MemoryAdapted.event_type else self.last_adaptation,
            last_restart=event if event.type == TrainerRestarted.event_type else self.last_restart,
            # a whole-tree resume is the newest restart now: the older one's cost is not its
            last_resume=None if whole_tree else TrainerResumed.of(event) or self.last_resume,
            restarts=_restarts_after(event, self.restarts),
            whole_tree_resumes=self.whole_tree_resumes + whole_tree,
            checkpoint_seq=event.seq if event.type in CHECKPOINT_EVENTS else self.checkpoint_seq,
            last_save=event if event.type in SAVE_EVENTS else self.last_save,
            critical_alerts=critical_after(event, self.critical_alerts),
            warning_alerts=warning_after(event, self.warning_alerts),
            resumed=self.resumed or event.type == RunContinued.event_type,
            alerts=(*self.alerts, event)[-MAX_ALERTS:] if event.type in KEPT_WITH_ALERTS else self.alerts,
            startup=_startup_after(event, self.startup, self.sample),
            started=TrainerStarted.of(event) or self.started,
            evals=evals_after(event, self.evals),
        ).with_stored_hardware(event)

    def with_stored_hardware(self, event: Event) -> RunView:
        """A ``doctor_report`` event carries a hardware reading: shown until a live one comes."""
        report = DoctorReported.of(event)
        return self if report is None else self.with_hardware(report.hardware)

    # ------------------------------------------------------------------ derived

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def startup_phase(self) -> StartupPhase | None:
        """The phase a starting trainer is in (None once it stepped, exited or the run ended)."""
        if self.startup is None or self.finished:
            return None
        return StartupPhase.of(self.startup)

    @property
    def step(self) -> int:
        return self.sample.step if self.sample else 0

    @property
    def progress(self) -> float | None:
        """Fraction of target steps done."""
        return min(1.0, self.step / self.target_steps) if self.target_steps else None

    @property
    def seconds_per_step(self) -> float | None:
        """Mean wall time per step over the current attempt (newest step time until there are two)."""
        s, first = self.sample, self.window_start
        if s is None or first is None:
            return None
        if s.step > first.step and s.ts > first.ts:
            return (s.ts - first.ts) / (s.step - first.step)
        return s.step_time_s or None

    @property
    def tokens_per_s_avg(self) -> float | None:
        s, first = self.sample, self.window_start
        if s is None or first is None or s.ts <= first.ts:
            return s.tokens_per_s if s else None
        return (s.tokens - first.tokens) / (s.ts - first.ts)

    def eta_s(self) -> float | None:
        """Seconds to the target step at the current pace; None when unknown or ended."""
        per_step = self.seconds_per_step
        if self.finished or not self.target_steps or per_step is None:
            return None
        return max(0, self.target_steps - self.step) * per_step

    def elapsed_s(self, now: float) -> float | None:
        return None if self.started_at is None else max(0.0, now - self.started_at)

    def ran_s(self) -> float | None:
        """A run that has ended: wall seconds from its start to its end (its final state change,
        else its newest step); None when the start or the end is not known."""
        ended = next(
            (e.ts for e in reversed(self.events) if _state_after(e, "running") in TERMINAL_STATES), None
        )
        if ended is None and self.sample is not None:
            ended = self.sample.ts
        return None if ended is None or self.started_at is None else max(0.0, ended - self.started_at)

    def data_age_s(self, now: float) -> float | None:
        return None if self.newest_data_at is None else max(0.0, now - self.newest_data_at)

    def chart_points(self, now: float, limit: int = LIVE_POINTS) -> tuple[Point, ...]:
        """At most ``limit`` points the charts draw: the newest live ones, or a longer window's
        store points folded to fit."""
        if self.window == "live" or self.window_points is None:
            newest = self.points[-1].ts if self.points else now
            recent = self.points[-limit:] if limit > 0 else ()
            end = newest if self.finished else max(now, newest)  # an ended run: its last minutes
            return tuple(within(recent, end, WINDOW_SECONDS["live"]))
        if limit <= 0:
            return ()
        if len(self.window_points) <= limit:
            return self.window_points
        # the whole window across the chart, not just its newest end (a bucket never spans a restart)
        return tuple(downsample(self.window_points, limit, len(self.window_points))[-limit:])

    def numerics_alerts(self) -> list[str]:
        """What an operator must look at now: scale at its floor, repeating overflows, NaN loss."""
        s = self.sample
        if s is None:
            return []
        alerts = []
        if not math.isfinite(s.loss):
            alerts.append(f"loss is {s.loss}")
        if s.loss_scale is not None and s.loss_scale <= self.thresholds.loss_scale_floor:
            alerts.append("loss scale at its floor")
        recent = sum(p.overflow for p in self.points[-OVERFLOW_ALERT_WINDOW:])
        if recent >= OVERFLOW_ALERT_COUNT:
            alerts.append(f"{recent} overflows in the last {OVERFLOW_ALERT_WINDOW} steps")
        return alerts


def _state_after(event: Event, state: RunState) -> RunState:
    """A ``state_changed`` event moves the view to its ``to``."""
    changed = StateChanged.of(event)
    return state if changed is None else changed.to


def _startup_after(event: Event, startup: Event | None, sample: TelemetrySample | None) -> Event | None:
    """A phase of an attempt that has not stepped yet begins; a trainer's exit ends it."""
    if event.type == StartupPhase.event_type:
        stepped = sample is not None and sample.attempt >= (event.attempt or 1)
        return startup if stepped else event  # replayed after the attempt's steps: over
    if event.type in (TrainerExited.event_type, RunEnded.event_type) or nodes_met(event, startup):
        return None
    return startup


def _startup_after_step(startup: Event | None, sample: TelemetrySample) -> Event | None:
    """The first step of the phase's attempt (or a later one's) ends the start-up."""
    return None if startup is not None and sample.attempt >= (startup.attempt or 1) else startup


def _ranks_after(
    sample: TelemetrySample, ranks: tuple[RankMemory, ...], step: int | None
) -> tuple[tuple[RankMemory, ...], int | None]:
    """The newest rank report: the sample's own, else the one before; none for one rank."""
    if sample.world_size <= 1:
        return (), None
    if sample.ranks:
        return tuple(sorted(sample.ranks, key=lambda r: r.rank)), sample.step
    return ranks, step


def _restarts_after(event: Event, restarts: int) -> int:
    """The restart count a ``trainer_restarted`` event gives; one more if its data is unreadable."""
    if event.type != TrainerRestarted.event_type:
        return restarts
    restarted = TrainerRestarted.of(event)
    return restarted.restarts if restarted is not None else restarts + 1


def _after_whole_tree_death(event: Event) -> int:
    """1 for a ``run_started`` that brought back a run whose supervisor died with its trainer."""
    started = RunStarted.of(event) if event.type == RunStarted.event_type else None
    return int(started is not None and started.after_whole_tree_death)


def _directives_after(event: Event, pending: tuple[DirectiveView, ...]) -> tuple[DirectiveView, ...]:
    """Pending directives after a ``directive_proposed`` or ``directive_decided`` event."""
    record = DirectiveProposed.of(event) or DirectiveDecided.of(event)
    if record is None:
        return pending  # another event, or a directive we cannot read (still in the event log)
    directive = record.directive
    others = tuple(d for d in pending if d.id != directive.id)
    return (*others, directive) if directive.state == "pending" else others


def _max(previous: float | None, value: float) -> float | None:
    return value if previous is None else max(previous, value)


def _ema(previous: float | None, value: float) -> float | None:
    if not math.isfinite(value):
        return previous  # a NaN step should not poison the trend; the raw loss shows it
    if previous is None:
        return value
    return previous + LOSS_EMA_ALPHA * (value - previous)


def _min(previous: float | None, value: float | None) -> float | None:
    if value is None:
        return previous
    return value if previous is None else min(previous, value)
