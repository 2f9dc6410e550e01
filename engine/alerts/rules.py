"""Alert rules: thresholds with hysteresis and throttling, as a pure state machine.

``AlertRules`` is fed what the supervisor sees (step samples, hardware snapshots, clock
ticks, restarts) with the time passed in, and answers the alerts to record. Nothing here
does I/O or reads a clock, so every rule is tested with made-up numbers and times.

Each condition has a ``Latch``: it fires when its value crosses the threshold, and clears
only once the value is back beyond the threshold by the hysteresis margin, so a value
hovering at the threshold raises one alert, not a storm. A latch that fires again within
``throttle_s`` of its last alert stays quiet; one that stays firing is repeated every
``repeat_s`` as a reminder.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from engine.alerts.fragmentation import FRAGMENTATION_STEPS, FragmentationCount
from engine.alerts.straggler import STRAGGLER_REPORTS, StragglerWatch
from engine.config.run_config import AlertConfig, MemoryConfig
from engine.domain import Event, Severity, TelemetrySample
from engine.events import HEARTBEAT_RULE, INSTANT_RULES, SUPERVISOR_RESTARTED, AlertRaised
from engine.hardware_report import SLOWING_THROTTLES, HardwareSnapshot
from engine.measures.disk_space import MiB, byte_size, reserve_bytes
from engine.measures.memory_scale import MemoryLevel, memory_level, room_share

Transition = Literal["fire", "resolve"]

SUSTAIN_STEPS = 5
"""Consecutive dropped steps before the throughput alert (one slow step is no trend), and
steps back within half the drop of the baseline before it clears (no flapping)."""
LOSS_SMOOTHING_STEPS = 20
"""Steps the loss is smoothed over (an exponential mean) before divergence is judged: a
noisy minibatch loss is no divergence."""
TEMPERATURE_HYSTERESIS_C = 5
"""Degrees below the alert temperature a GPU must fall to clear its alert."""
NEXT_CHECKPOINT_FACTOR = 1.5
"""Free checkpoint disk must exceed the newest checkpoint's size times this (room for the
next one while the oldest is still kept), plus ``alerts.disk_min_free_mb``."""


@dataclass(frozen=True)
class Alert:
    rule: str
    """e.g. ``heartbeat``, ``memory_headroom``, ``gpu_temperature.0``."""
    severity: Severity
    message: str
    data: dict[str, Any] = field(default_factory=dict)
    resolved: bool = False
    """True for the "back to normal" alert after one that fired."""

    def payload(self) -> AlertRaised:
        """The ``alert`` event's payload: the rule, firing or resolved, and its figures."""
        return AlertRaised(rule=self.rule, state="resolved" if self.resolved else "firing", **self.data)


@dataclass
class Latch:
    """Hysteresis and throttling for one condition."""

    active: bool = False
    announced: bool = False
    """The current activation was alerted (so its end is too)."""
    last_alert: float = -math.inf

    def update(
        self, firing: bool, clear: bool, now: float, throttle_s: float, repeat_s: float
    ) -> Transition | None:
        """``firing``: over the threshold; ``clear``: back beyond it by the margin."""
        if not self.active and firing:
            self.active = True
            self.announced = now - self.last_alert >= throttle_s
        elif self.active and clear:
            self.active = False
            return "resolve" if self.announced else None
        elif self.active and firing and now - self.last_alert >= repeat_s:
            self.announced = True
        else:
            return None
        if self.announced and now - self.last_alert >= min(throttle_s, repeat_s):
            self.last_alert = now
            return "fire"
        return None


@dataclass
class _Baseline:
    """Exponential moving average; None until it has seen ``warmup`` values."""

    alpha: float
    warmup: int
    value: float | None = None
    seen: int = 0

    def add(self, x: float) -> None:
        self.seen += 1
        self.value = x if self.value is None else self.value + self.alpha * (x - self.value)

    @property
    def ready(self) -> bool:
        return self.value is not None and self.seen >= self.warmup


class AlertRules:
    """The alert rules of one run. Feed it; it answers alerts to record."""

    def __init__(self, config: AlertConfig, memory: MemoryConfig | None = None) -> None:
        self.config = config
        self.memory = memory or MemoryConfig()
        """The run's ``memory`` section: the thresholds memory is judged by, the controller's
        and the console's (None: that section's own defaults)."""
        self._memory_level: MemoryLevel = "ok"
        self._latches: dict[str, Latch] = {}
        self._tokens = _Baseline(
            2.0 / (config.throughput_baseline_steps + 1), config.throughput_baseline_steps
        )
        self._dropped_steps = 0
        self._recovered_steps = 0
        self._starved = self._fed = 0  # consecutive steps over / under the data-wait share
        self._loss = _Baseline(2.0 / (LOSS_SMOOTHING_STEPS + 1), LOSS_SMOOTHING_STEPS)
        self._best_loss = math.inf
        self._geometry: tuple[int, int, int] | None = None  # (attempt, micro-batch, accumulation)
        self._last_beat: float | None = None
        self._fragments = FragmentationCount(
            config.fragmentation_share, FRAGMENTATION_STEPS, config.hysteresis
        )
        self._stragglers = StragglerWatch(config.straggler_slower, config.hysteresis)

    # --------------------------------------------------------------------- inputs

    def beat(self, now: float) -> None:
        """A sign of life that starts the heartbeat clock (a trainer launched)."""
        self._last_beat = now

    def on_step(self, sample: TelemetrySample, now: float) -> list[Alert]:
        out = self._heartbeat_back(now)
        self._last_beat = now
        out += self._memory(sample, now)
        out += self._fragmentation(sample, now)
        out += self._data_wait(sample, now)
        out += self._throughput(sample, now)
        out += self._loss_rules(sample, now)
        out += self._loss_scale(sample, now)
        out += self._straggler(sample, now)
        return out

    def on_tick(self, now: float, expecting_steps: bool) -> list[Alert]:
        """The heartbeat: no step for ``no_step_s`` while the run should be stepping."""
        if not expecting_steps or self._last_beat is None:
            return []
        quiet = now - self._last_beat
        return self._judge(
            HEARTBEAT_RULE,
            quiet >= self.config.no_step_s,
            False,  # only a step clears it (on_step)
            now,
            "critical",
            f"no step for {quiet:.0f} s (limit {self.config.no_step_s:g} s): the run may be stuck",
            {"quiet_s": round(quiet, 1), "limit_s": self.config.no_step_s},
        )

    def on_hardware(
        self, snapshot: HardwareSnapshot, now: float, next_checkpoint_bytes: int = 0
    ) -> list[Alert]:
        out: list[Alert] = []
        cfg = self.config
        for gpu in snapshot.gpus:
            if gpu.temperature_c is not None:
                limit = cfg.temperature_c
                if gpu.temperature_slowdown_c is not None:
                    limit = min(limit, gpu.temperature_slowdown_c - cfg.temperature_margin_c)
                out += self._judge(
                    f"gpu_temperature.{gpu.index}",
                    gpu.temperature_c >= limit,
                    gpu.temperature_c < limit - TEMPERATURE_HYSTERESIS_C,
                    now,
                    "warning",
                    f"GPU {gpu.index} at {gpu.temperature_c} C (alert at {limit} C)",
                    {"gpu": gpu.index, "temperature_c": gpu.temperature_c, "limit_c": limit},
                )
            slowing = sorted(SLOWING_THROTTLES.intersection(gpu.throttle_reasons))
            out += self._judge(
                f"gpu_throttle.{gpu.index}",
                bool(slowing),
                not slowing,
                now,
                "warning",
                f"GPU {gpu.index} clocks throttled: {', '.join(slowing)}",
                {"gpu": gpu.index, "reasons": slowing},
            )
        for disk in snapshot.host.disks:
            if disk.label != "checkpoints" or disk.free_bytes is None:
                continue
            need = next_checkpoint_bytes * NEXT_CHECKPOINT_FACTOR + reserve_bytes(
                cfg.disk_min_free_mb * MiB, disk.total_bytes
            )
            out += self._judge(
                "disk_low",
                disk.free_bytes < need,
                disk.free_bytes >= need * (1 + cfg.hysteresis),
                now,
                "critical",
                f"checkpoint disk low: {byte_size(disk.free_bytes)} free, the next checkpoint needs "
                f"about {byte_size(int(need))}",
                {"free_bytes": disk.free_bytes, "need_bytes": int(need), "path": disk.path},
            )
        return out

    def on_restart(self, now: float, message: str, data: dict[str, Any]) -> list[Alert]:
        """Every restart is worth a look; throttled so a crash loop is one alert per window."""
        fired = self._judge("restart", True, False, now, "warning", f"trainer restarted: {message}", data)
        self._latch("restart").active = False  # a restart is an instant, not a state
        return fired

    # ---------------------------------------------------------------------- rules

    def _heartbeat_back(self, now: float) -> list[Alert]:
        latch = self._latches.get(HEARTBEAT_RULE)
        if latch is None or not latch.active:
            return []
        return self._judge(HEARTBEAT_RULE, False, True, now, "info", "steps resumed", {})

    def _memory(self, s: TelemetrySample, now: float) -> list[Alert]:
        """Low headroom: the step's peak judged as the memory controller judges its expected
        peak (share of the usable room, fragmentation counted, ``memory.warn`` and
        ``memory.critical`` with ``memory.hysteresis``); firing while the level is not ok."""
        limit = s.mem_budget or s.mem_capacity
        if not limit or (s.mem_step_peak is None and not s.mem_reserved):
            return []
        if s.mem_step_peak is None:  # reserved bytes already count the fragmentation
            used, fragmented = s.mem_reserved or 0, 0
        else:
            used, fragmented = s.mem_step_peak, s.mem_fragmentation or 0
        baseline = s.mem_baseline if s.mem_budget else None
        share, memory = room_share(used, limit, baseline, fragmented), self.memory
        level = memory_level(share, memory.warn, memory.critical, memory.hysteresis, self._memory_level)
        self._memory_level = level
        room = "the usable room" if baseline else ("budget" if s.mem_budget else "capacity")
        return self._judge(
            "memory_headroom",
            level != "ok",
            level == "ok",
            now,
            "critical" if level == "critical" else "warning",
            f"memory {share:.0%} of {room} ({s.mem_kind}): {level}; alert at {memory.warn:.0%}",
            {"fraction": round(share, 4), "level": level, "used": used, "limit": limit, "step": s.step},
        )

    def _fragmentation(self, s: TelemetrySample, now: float) -> list[Alert]:
        reading, cfg = self._fragments.note(s), self.config
        if reading is None:
            return []
        return self._judge(
            "memory_fragmentation",
            reading.firing,
            reading.clear,
            now,
            "warning",
            f"memory fragmented: {reading.share:.0%} of the reserved bytes unusable for "
            f"{FRAGMENTATION_STEPS} steps (alert at {cfg.fragmentation_share:.0%})",
            {
                "share": round(reading.share, 4),
                "fragmented": s.mem_fragmentation,
                "reserved": s.mem_reserved,
                "step": s.step,
            },
        )

    def _data_wait(self, s: TelemetrySample, now: float) -> list[Alert]:
        """Data starvation: the step waited for its batches for ``data_wait_share`` of its
        time or more, ``SUSTAIN_STEPS`` reported steps in a row; it clears after as many
        under the share less the hysteresis."""
        if s.data_wait_s is None or s.step_time_s <= 0:
            return []
        share, cfg = s.data_wait_s / s.step_time_s, self.config
        self._starved = self._starved + 1 if share >= cfg.data_wait_share else 0
        self._fed = self._fed + 1 if share < cfg.data_wait_share - cfg.hysteresis else 0
        return self._judge(
            "data_starved",
            self._starved >= SUSTAIN_STEPS,
            self._fed >= SUSTAIN_STEPS,
            now,
            "warning",
            f"training waits for data {share:.0%} of each step ({s.data_wait_s:.3f} of "
            f"{s.step_time_s:.3f} s, alert at {cfg.data_wait_share:.0%}): the workload's batch() "
            "is slower than a step (pre-tokenize, cache, or a lighter batch)",
            {
                "share": round(share, 4),
                "data_wait_s": s.data_wait_s,
                "step_time_s": s.step_time_s,
                "step": s.step,
            },
        )

    def _throughput(self, s: TelemetrySample, now: float) -> list[Alert]:
        """A drop sustained for ``SUSTAIN_STEPS`` fires; it clears only once
        tokens/s is back within half the drop of the baseline for as many steps in a row
        (a shared machine hovering around the threshold does not flap it)."""
        run = (s.attempt, s.micro_batch, s.grad_accum)
        if run != self._geometry:  # a new attempt (its start-up) or geometry runs at a new speed
            self._geometry = run
            self._tokens = _Baseline(self._tokens.alpha, self._tokens.warmup)
            self._dropped_steps = self._recovered_steps = 0
        base, cfg = self._tokens, self.config
        if not base.ready or base.value is None or base.value <= 0:
            base.add(s.tokens_per_s)
            return []
        ratio = s.tokens_per_s / base.value
        self._dropped_steps = self._dropped_steps + 1 if ratio < 1 - cfg.throughput_drop else 0
        back = ratio >= 1 - cfg.throughput_drop / 2  # halfway back to the baseline
        self._recovered_steps = self._recovered_steps + 1 if back else 0
        alerts = self._judge(
            "throughput_drop",
            self._dropped_steps >= SUSTAIN_STEPS,
            self._recovered_steps >= SUSTAIN_STEPS,
            now,
            "warning",
            f"tokens/s {s.tokens_per_s:,.0f} is {1 - ratio:.0%} below its baseline {base.value:,.0f}",
            {"tokens_per_s": s.tokens_per_s, "baseline": base.value, "step": s.step},
        )
        if not self._latch("throughput_drop").active and self._dropped_steps == 0:
            base.add(s.tokens_per_s)  # the baseline does not learn the drop it alerts on
        return alerts

    def _loss_rules(self, s: TelemetrySample, now: float) -> list[Alert]:
        finite = math.isfinite(s.loss)
        out = self._judge(
            "loss_nan",
            not finite,
            finite,
            now,
            "critical",
            f"loss is {s.loss} at step {s.step}",
            {"step": s.step},
        )
        if not finite:
            return out
        self._loss.add(s.loss)
        if not self._loss.ready or self._loss.value is None:
            return out
        smooth = self._loss.value
        self._best_loss = min(self._best_loss, smooth)
        ratio, cfg = smooth / self._best_loss if self._best_loss > 0 else 1.0, self.config
        out += self._judge(
            "loss_diverging",
            ratio >= cfg.loss_diverge_ratio,
            ratio < cfg.loss_diverge_ratio - cfg.hysteresis,
            now,
            "critical",
            f"loss diverging: smoothed {smooth:.3f} is {ratio:.2f}x its best {self._best_loss:.3f}",
            {"loss": smooth, "best": self._best_loss, "step": s.step},
        )
        return out

    def _loss_scale(self, s: TelemetrySample, now: float) -> list[Alert]:
        if s.loss_scale is None:
            return []
        floor = self.config.loss_scale_floor
        return self._judge(
            "loss_scale_floor",
            s.loss_scale <= floor,
            s.loss_scale >= 2 * floor,  # one doubling above the floor
            now,
            "critical",
            f"fp16 loss scale at its floor ({s.loss_scale:g}) at step {s.step}",
            {"loss_scale": s.loss_scale, "step": s.step},
        )

    def _straggler(self, s: TelemetrySample, now: float) -> list[Alert]:
        """One rule per rank (``straggler.<rank>``), judged on the samples that carry a report."""
        out: list[Alert] = []
        need = STRAGGLER_REPORTS
        for pace in self._stragglers.on_report(s.ranks or []):
            out += self._judge(
                f"straggler.{pace.rank}",
                pace.slow_reports >= need,
                pace.back_reports >= need,
                now,
                "warning",
                f"rank {pace.rank} is a straggler: {pace.step_s:.3f} s of its own work per step, "
                f"{pace.slower:.0%} above the ranks' median {pace.median_s:.3f} s",
                {"rank": pace.rank, "step_s": pace.step_s, "median_s": pace.median_s, "step": s.step},
            )
        return out

    # -------------------------------------------------------------------- latches

    def _latch(self, rule: str) -> Latch:
        return self._latches.setdefault(rule, Latch())

    def _judge(
        self,
        rule: str,
        firing: bool,
        clear: bool,
        now: float,
        severity: Severity,
        message: str,
        data: dict[str, Any],
    ) -> list[Alert]:
        cfg = self.config
        transition = self._latch(rule).update(firing, clear, now, cfg.throttle_s, cfg.repeat_s)
        if transition == "fire":
            return [Alert(rule, severity, message, data)]
        if transition == "resolve":
            return [Alert(rule, "info", f"resolved: {rule.replace('_', ' ')}", data, resolved=True)]
        return []


# ------------------------------------------------------------- a new supervisor


def still_firing(events: Iterable[Event]) -> dict[str, Event]:
    """Rule -> its newest firing ``alert`` event that no later "resolved" one closed.

    ``events`` in sequence order (the store's). Instants (a restart) never stand.
    """
    firing: dict[str, Event] = {}
    for event in events:
        alert = AlertRaised.of(event)
        if alert is None or alert.rule in INSTANT_RULES:
            continue
        if alert.resolved:
            firing.pop(alert.rule, None)
        else:
            firing[alert.rule] = event
    return firing


def restart_resolutions(firing: Mapping[str, Event]) -> list[Alert]:
    """A "resolved" alert for each alert a previous supervisor left firing.

    Why close them rather than carry them over: the rules' state (latches, the throughput
    and loss baselines, the heartbeat clock) lived in the dead supervisor's memory, so a
    carried-over alert might never see the condition that clears it (a loss baseline not yet
    warm, a heartbeat only a step clears) and would fire in the console forever. Closing
    each one, saying why, ends its episode honestly; the new supervisor's rules then judge
    afresh and raise the alert again, as a new episode, if its condition still holds.
    """
    return [
        Alert(
            rule,
            "info",
            f"resolved: {rule.replace('_', ' ')} (supervisor restarted: the rule is re-evaluated "
            "and fires again if still true)",
            {"reason": SUPERVISOR_RESTARTED, "fired_seq": event.seq},
            resolved=True,
        )
        for rule, event in sorted(firing.items())
    ]
