"""One memory scale and one level vocabulary: the controller reads its thresholds from the
``memory`` section, and the controller, the memory alert and the console judge one reading
alike (a share of the usable room, ok / warn / critical)."""

from __future__ import annotations

import dataclasses
from typing import Any, get_args

import pytest

from engine import domain
from engine.alerts.rules import AlertRules
from engine.config.run_config import AlertConfig, MemoryConfig, TrainConfig
from engine.domain import Event, TelemetrySample, Thresholds
from engine.events import MemoryLevelChanged, payload_of
from engine.measures.memory_scale import MemoryLevel as Level
from engine.memory.controller import ControllerState, Geometry, Policy, Reading, decide, level_of
from memtui.console.widgets import hardware_panel, memory_panel

MIB = 1 << 20


def test_the_controller_view_has_no_defaults_and_mirrors_no_memory_key() -> None:
    fields = dataclasses.fields(Policy)
    assert all(f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING for f in fields)
    mirrored = {f.name for f in fields} & set(MemoryConfig.model_fields)
    assert mirrored == {"max_micro_batch"}  # resolved there: None means train.micro_batch


def test_a_memory_key_reaches_the_controller_from_the_config_section() -> None:
    """``retry_after_steps`` set in the section (not the controller) decides when a failed
    micro-batch may be grown back into."""
    train = TrainConfig(global_batch=16, micro_batch=4)
    section = MemoryConfig(retry_after_steps=3, steady_steps=1, cooldown_steps=0, max_micro_batch=8)
    policy = Policy.from_config(section, train)
    assert policy.memory is section and policy.max_micro_batch == 8
    predicted = {1: 10, 2: 20, 4: 40, 8: 60}  # 8 fits: 60% of the room, under grow_below
    state = ControllerState()
    state = dataclasses.replace(state, history=state.history.with_failure(8, 0, 100))
    grown_at = None
    for step in range(1, 10):
        reading = Reading(step, predicted[4], 100, predicted)
        state, change = decide(state, Geometry(4, 4), reading, policy)
        if change is not None:
            grown_at = step
            break
    assert grown_at == 3  # blocked for the section's 3 steps after the failure at step 0


def sample(step: int, peak: int, budget: int, baseline: int | None, fragmented: int) -> TelemetrySample:
    fields: dict[str, Any] = dict(
        step=step,
        ts=0.0,
        samples=step,
        tokens=step,
        loss=2.0,
        lr=1e-3,
        step_time_s=0.1,
        tokens_per_s=1000.0,
        mem_reserved=peak + fragmented,
        mem_capacity=2 * budget,
        mem_budget=budget,
        mem_step_peak=peak,
        mem_baseline=baseline,
        mem_fragmentation=fragmented,
        micro_batch=8,
        grad_accum=1,
    )
    return TelemetrySample(**fields)


# (peak, budget, baseline, fragmentation) in MiB, one step after another: up through
# warn and critical, back down through the hysteresis bands, then no room at all.
READINGS = [
    (40, 100, 20, 0),  # 25% of the room: ok (and 40% of the budget)
    (87, 100, 20, 0),  # 84%: ok
    (86, 100, 20, 2),  # 85% with the fragmentation: warn, though 86% of the budget
    (82, 100, 20, 0),  # 77.5%: still warn (left only below 80%)
    (97, 100, 20, 0),  # 96%: critical
    (95, 100, 20, 0),  # 94%: still critical (left below 90%)
    (91, 100, 20, 0),  # 89%: warn
    (83, 100, 20, 0),  # 79%: ok
    (90, 100, None, 0),  # baseline unknown: 90% of the budget, warn
    (30, 100, 100, 0),  # baseline at the budget: no room, critical
]


@pytest.mark.parametrize("memory", [MemoryConfig(), MemoryConfig(warn=0.7, critical=0.9, hysteresis=0.1)])
def test_the_memory_alert_and_the_controller_agree_on_the_level(memory: MemoryConfig) -> None:
    policy = Policy.from_config(memory, TrainConfig(global_batch=8, micro_batch=8))
    rules = AlertRules(AlertConfig(throttle_s=0.0), memory)
    colour = Thresholds(memory_warn=memory.warn, memory_critical=memory.critical, loss_scale_floor=1.0)
    controller_level: Level = "ok"
    firing, seen = False, set()
    for step, (peak, budget, baseline, fragmented) in enumerate(READINGS, start=1):
        peak, budget, fragmented = peak * MIB, budget * MIB, fragmented * MIB
        base = None if baseline is None else baseline * MIB
        reading = Reading(step, peak, budget, {8: peak}, base or 0, fragmentation=fragmented)
        controller_level = level_of(controller_level, reading.share(peak), policy)
        seen.add(controller_level)
        for alert in rules.on_step(sample(step, peak, budget, base, fragmented), float(step)):
            firing = not alert.resolved
            assert alert.data["level"] == controller_level, step  # fired or resolved at its level
        assert firing == (controller_level != "ok"), (step, controller_level)
        # the console colours each reading afresh (no hysteresis) on the same scale
        console = colour.room_level(peak + fragmented, budget, base)
        assert console == level_of("ok", reading.share(peak), policy), step
    assert seen == set(get_args(Level))  # the table crosses every level


def test_one_level_vocabulary_for_the_controller_events_domain_and_console() -> None:
    assert get_args(domain.MemoryLevel) == get_args(Level) == ("ok", "warn", "critical")
    assert get_args(MemoryLevelChanged.model_fields["level"].annotation) == get_args(Level)
    assert set(memory_panel.LEVEL_STYLES) == set(hardware_panel.LEVEL_STYLES) == set(get_args(Level))


def test_memory_level_events_stored_before_read_back() -> None:
    stored = Event(
        seq=7,
        ts=0.0,
        type="memory_level",
        severity="warning",
        message="memory ok -> warn at step 12",
        data={"step": 12, "level": "warn", "previous": "ok", "expected_peak": 900, "mem_budget": 1000},
    )
    payload = payload_of(stored)
    assert isinstance(payload, MemoryLevelChanged)
    assert (payload.previous, payload.level) == ("ok", "warn")
