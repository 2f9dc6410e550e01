"""The endurance report and the run-wide throughput on a synthetic store: every figure
equals a direct count over the store's rows (made in Python here, not with the report's SQL)."""

from __future__ import annotations

import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.domain import DecisionRecord, TelemetrySample, ThroughputFigures
from engine.events import (
    ChaosInjected,
    ChaosRecovered,
    CheckpointSaved,
    LegacyChaos,
    MemoryAdapted,
    MemoryExhausted,
    RunStarted,
    TrainerRestarted,
)
from engine.run.directory import RunDir
from engine.run.reports.endurance_report import endurance_report
from engine.run.reports.status import offline_status
from engine.run.reports.throughput import throughput_of
from engine.run.storage.store import Store
from memtui.status_report import status_rows

T0 = 1_700_000_000.0
# (attempt, first step, last step): attempt 2 replays 41..60 after a restart, attempt 3 (a
# whole-tree resume) replays 111..120; attempt 4 was launched and never stepped.
ATTEMPTS = [(1, 1, 60), (2, 41, 120), (3, 111, 200)]


def _sample(attempt: int, step: int, rng: random.Random, mb: int) -> TelemetrySample:
    step_time = rng.uniform(0.05, 0.2)
    return TelemetrySample(
        step=step,
        ts=T0 + attempt * 1000 + step,
        attempt=attempt,
        samples=8 * step,
        tokens=512 * step,
        loss=2.0,
        lr=1e-3,
        step_time_s=step_time,
        tokens_per_s=rng.uniform(1000.0, 5000.0),
        micro_batch=mb,
        grad_accum=8 // mb,
        checkpoint_stall_s=0.5 if step % 20 == 0 else None,
    )


def _record(store: Store, payload: object, attempt: int | None = None) -> None:
    data = payload.model_dump(mode="json")  # type: ignore[attr-defined]
    store.append_event(payload.event_type, data=data, attempt=attempt)  # type: ignore[attr-defined]


def _write(run: RunDir, *, ended: bool) -> None:
    rng = random.Random(7)
    with Store(run.store) as store:
        store.update_meta(state="running", attempt=1, restarts=0, started_at=T0)
        _record(store, RunStarted(supervisor_pid=1, run_dir=str(run.path)))
        for attempt, first, last in ATTEMPTS:
            store.append_event(
                "trainer_launched", data={"attempt": attempt, "pid": 10, "command": []}, attempt=attempt
            )
            for step in range(first, last + 1):
                store.add_step(_sample(attempt, step, rng, mb=4 if step < 150 else 2))
            if attempt == 1:
                _record(store, ChaosInjected(chaos_id="c1", kind="kill", step=60), attempt)
                _record(
                    store,
                    TrainerRestarted(
                        cause="killed",
                        returncode=-9,
                        last_step=60,
                        delay_s=1,
                        restarts=1,
                        streak=1,
                        next_attempt=2,
                    ),
                    attempt,
                )
                _record(store, ChaosRecovered(chaos_id="c1", kind="kill", recovered=True, seconds=3.0), 2)
            if attempt == 2:
                _record(store, LegacyChaos(action="kill_trainer"), attempt)
                _record(store, ChaosInjected(chaos_id="c2", kind="nan_loss", step=100), attempt)
                _record(
                    store, ChaosRecovered(chaos_id="c2", kind="nan_loss", recovered=False, seconds=9.0), 2
                )
                _record(
                    store,
                    MemoryAdapted(
                        kind="oom",
                        reason="oom",
                        step=90,
                        from_micro_batch=4,
                        to_micro_batch=2,
                        from_grad_accum=2,
                        to_grad_accum=4,
                    ),
                    attempt,
                )
                _record(store, RunStarted(supervisor_pid=2, run_dir=str(run.path), previous_state="running"))
            if attempt == 3:
                _record(
                    store,
                    MemoryAdapted(
                        kind="shrink",
                        reason="budget",
                        step=150,
                        from_micro_batch=4,
                        to_micro_batch=2,
                        from_grad_accum=2,
                        to_grad_accum=4,
                    ),
                    attempt,
                )
                _record(store, MemoryExhausted(step=190, restartable=False), attempt)
                _record(
                    store,
                    CheckpointSaved(
                        step=200,
                        tag="global_step200",
                        seconds=0.5,
                        write_s=0.3,
                        seal_s=0.2,
                        background=False,
                        size_bytes=1,
                    ),
                    attempt,
                )
        store.append_event("trainer_launched", data={"attempt": 4, "pid": 11, "command": []}, attempt=4)
        _record(store, RunStarted(supervisor_pid=3, run_dir=str(run.path), previous_state="stopped"))
        for i, verdict in enumerate(["allow", "clamp", "reject", "reject", "allow"]):
            store.add_decision(
                DecisionRecord(
                    ts=T0,
                    decision_id=f"d{i}",
                    directive_id=f"x{i % 4}",
                    source="rules",
                    verdict=verdict,
                    state="approved",  # type: ignore[arg-type]
                )
            )
        store.append_event("directive_applied", data={"applied": {"lr_multiplier": 0.5}}, attempt=3)
        if ended:
            store.update_meta(state="stopped")
        store.flush()


def test_status_counts_the_restarts_the_report_and_the_header_count(run: RunDir) -> None:
    """A whole-tree death brought back by a resume is a restart in ``status`` too, said
    apart, as the report and the console's header count it."""
    _write(run, ended=True)
    with Store(run.store, readonly=True) as store:
        report = endurance_report(run, store)
    status = offline_status(run)
    assert status.whole_tree_resumes == report.whole_tree_resumes == 1
    shown = dict(status_rows(status, now=0.0))["restarts"]
    assert shown == f"{status.restarts + 1}, 1 after the whole tree died"


@pytest.mark.parametrize("ended", [True, False])
def test_report_figures_equal_direct_counts(run: RunDir, ended: bool) -> None:
    _write(run, ended=ended)
    with Store(run.store, readonly=True) as store:
        report = endurance_report(run, store)
        samples = list(store.iter_steps())
        events = store.events_since(0)
    types = [e.type for e in events]
    assert report.target_steps == 100 and report.state == ("stopped" if ended else "running")
    assert report.steps_sustained == max(s.step for s in samples) == 200
    assert report.step_samples == len(samples)
    stamps = [s.ts for s in samples] + [e.ts for e in events]
    assert report.wall_s == pytest.approx(max(stamps) - min(stamps))
    assert report.fatal_ooms == types.count("memory_exhausted") == 1
    assert report.ooms_recovered == 1 and len(report.adaptations) == types.count("memory_adapted") == 2
    assert report.samples_per_step_constant
    assert {k: (v.injected, v.recovered, v.failed) for k, v in report.chaos.items()} == {
        "kill": (2, 1, 0),  # one chaos_injected, one legacy kill_trainer
        "nan_loss": (1, 0, 1),
    }
    assert report.restarts == types.count("trainer_restarted") == 1
    assert report.whole_tree_resumes == 1  # the resume after "stopped" is an ordinary one
    # attempts 2 and 3 stepped; 4 never did: a failure once the run ended, pending while live
    assert (report.resumes, report.resumes_stepped) == ((3, 2) if ended else (2, 2))
    replayed = 0
    for attempt, _, _ in ATTEMPTS:
        before = [s.step for s in samples if s.attempt < attempt]
        replayed += sum(1 for s in samples if s.attempt == attempt and before and s.step <= max(before))
    assert report.steps_replayed == replayed == 20 + 10
    stall = sum(s.checkpoint_stall_s or 0.0 for s in samples)
    assert report.checkpoint_stall_s == pytest.approx(stall)
    assert report.stall_share == pytest.approx(stall / report.wall_s)
    assert report.saves == 1 and report.saves_failed == 0
    assert (report.directives_proposed, report.directives_clamped, report.directives_rejected) == (4, 1, 2)
    assert report.directives_applied == 1
    doc = report.document()
    assert (
        doc["resume_success"] == report.resume_success and doc["chaos"]["kill"]["pending"] == 1
    )  # the legacy one has no verdict


def test_throughput_is_tokens_over_step_time_of_every_attempt(run: RunDir) -> None:
    _write(run, ended=True)
    with Store(run.store, readonly=True) as store:
        figures = throughput_of(store, window_steps=10)
        samples = list(store.iter_steps())

    assert figures.steps == len(samples) and figures.attempt == 3
    assert figures.run_avg_tokens_per_s == pytest.approx(_avg(samples))
    current = [s for s in samples if s.attempt == 3]
    assert figures.attempt_avg_tokens_per_s == pytest.approx(_avg(current))
    windows = [_avg(w) for a in (1, 2, 3) for w in _windows([s for s in samples if s.attempt == a], 10)]
    assert figures.run_peak_tokens_per_s == pytest.approx(max(windows))
    assert figures.attempt_peak_tokens_per_s == pytest.approx(max(_avg(w) for w in _windows(current, 10)))
    assert math.isfinite(figures.step_seconds) and figures.step_seconds > 0


def test_a_peak_is_never_below_the_average_when_the_run_ends_inside_a_window(run: RunDir) -> None:
    """Slow first window, fast partial one after it (75 steps, windows of 50): the partial
    block is in the average, so it is in a peak's window too."""
    with Store(run.store) as store:
        for step in range(1, 76):
            fast = step > 50
            timing = (
                {"step_time_s": 0.1, "tokens_per_s": 5000.0}
                if fast
                else {"step_time_s": 1.0, "tokens_per_s": 500.0}
            )
            store.add_step(_sample(1, step, random.Random(step), mb=4).model_copy(update=timing))
    with Store(run.store, readonly=True) as store:
        figures = throughput_of(store, window_steps=50)
        samples = list(store.iter_steps())
    assert figures.run_avg_tokens_per_s == pytest.approx(_avg(samples))
    assert figures.run_peak_tokens_per_s is not None and figures.attempt_peak_tokens_per_s is not None
    assert figures.run_peak_tokens_per_s >= figures.run_avg_tokens_per_s
    assert figures.attempt_peak_tokens_per_s >= figures.attempt_avg_tokens_per_s  # type: ignore[operator]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    attempts=st.lists(
        st.tuples(st.integers(1, 130), st.lists(st.floats(10.0, 1e5), min_size=1, max_size=7)),
        min_size=1,
        max_size=4,
    ),
    window=st.sampled_from([1, 7, 50]),
)
def test_a_peak_is_never_below_its_average(
    tmp_path_factory: pytest.TempPathFactory, attempts: list[tuple[int, list[float]]], window: int
) -> None:
    """Any attempts (each replaying from some step, restarts mid-block), any speeds."""
    path = tmp_path_factory.mktemp("tally") / "t.sqlite"
    with Store(path) as store:
        first = 1
        for attempt, (length, speeds) in enumerate(attempts, start=1):
            for i, step in enumerate(range(first, first + length)):
                speed = speeds[i % len(speeds)]
                timing = {"tokens_per_s": speed, "step_time_s": 512 / speed}
                sample = _sample(attempt, step, random.Random(step), mb=4).model_copy(update=timing)
                store.add_step(sample)
            first = max(1, first + length - length // 3)  # the next attempt replays a third
    with Store(path, readonly=True) as store:
        f = throughput_of(store, window_steps=window)
    assert f.run_peak_tokens_per_s is not None and f.attempt_peak_tokens_per_s is not None
    assert f.run_peak_tokens_per_s >= f.run_avg_tokens_per_s * (1 - 1e-9)  # type: ignore[operator]
    assert f.attempt_peak_tokens_per_s >= f.attempt_avg_tokens_per_s * (1 - 1e-9)  # type: ignore[operator]


def test_throughput_keys_name_their_unit_and_old_keys_still_read() -> None:
    figures = ThroughputFigures(run_avg_tokens_per_s=10.0, run_peak_tokens_per_s=12.0, window_steps=50)
    assert set(figures.model_dump()) >= {"run_avg_tokens_per_s", "run_peak_tokens_per_s"}
    old = ThroughputFigures.model_validate({"run_avg": 10.0, "run_peak": 12.0, "attempt_avg": 9.0})
    assert (old.run_avg_tokens_per_s, old.run_peak_tokens_per_s, old.attempt_avg_tokens_per_s) == (
        10.0,
        12.0,
        9.0,
    )


def _avg(rows: list[TelemetrySample]) -> float:
    return sum(s.tokens_per_s * s.step_time_s for s in rows) / sum(s.step_time_s for s in rows)


def _windows(rows: list[TelemetrySample], window: int) -> list[list[TelemetrySample]]:
    """One attempt's steps in step-aligned blocks, each partial block joined to the one
    before it (or, the first, to the one after)."""
    blocks: dict[int, list[TelemetrySample]] = {}
    for s in rows:
        blocks.setdefault((s.step - 1) // window, []).append(s)
    windows: list[list[TelemetrySample]] = []
    head: list[TelemetrySample] = []
    for block in (blocks[k] for k in sorted(blocks)):
        block = head + block
        head = []
        if len(block) >= window:
            windows.append(block)
        elif windows:
            windows[-1] += block
        else:
            head = block
    return windows + ([head] if head else [])


def test_status_carries_the_run_wide_figures_and_none_before_a_step(run: RunDir) -> None:
    with Store(run.store) as store:
        store.update_meta(state="starting")
    empty = offline_status(run).throughput
    assert empty is not None and empty.run_avg_tokens_per_s is None and empty.steps == 0
    _write(run, ended=True)
    figures = offline_status(run).throughput
    assert figures is not None and figures.run_avg_tokens_per_s is not None and figures.attempt == 3


def test_the_report_lists_each_rollback_with_the_steps_given_up(run: RunDir) -> None:
    from engine.events import RolledBack
    from memtui.endurance_markdown import render_markdown

    done = RolledBack(
        directive_id="d-1", tag="global_step60", tag_step=60, from_step=70, steps_given_up=10, skip_batches=4
    )
    with Store(run.store) as store:
        _record(store, done, attempt=1)
    with Store(run.store, readonly=True) as store:
        report = endurance_report(run, store)
    assert report.rollbacks == [done]
    assert "| global_step60 | 70 | 10 | 4 |" in render_markdown(report)
