"""The report's split of what chaos cost: outage and replay per restart, slowed steps, on a
synthetic store (every figure made by hand) and on a real supervisor run with a kill."""

from __future__ import annotations

import json
import sqlite3
from typing import Any

import pytest

from engine.chaos.kinds.processes import Kill
from engine.domain import TelemetrySample
from engine.events import ChaosInjected, ChaosRecovered, StandbyReady
from engine.run.directory import RunDir
from engine.run.reports.chaos_cost import RestartCost, chaos_cost
from engine.run.reports.endurance_report import EnduranceReport, endurance_report
from engine.run.storage.store import Store
from engine.wire.protocol import Chaos
from memtui.endurance_markdown import render_markdown
from tests.engine.test_chaos_supervisor import is_event, running_console
from tests.waiting import until

T0 = 1_700_000_000.0


def _sample(attempt: int, step: int, ts: float, step_time_s: float) -> TelemetrySample:
    return TelemetrySample(
        step=step,
        ts=ts,
        attempt=attempt,
        samples=8 * step,
        tokens=512 * step,
        loss=2.0,
        lr=1e-3,
        step_time_s=step_time_s,
        tokens_per_s=1000.0,
        micro_batch=8,
        grad_accum=1,
    )


def _event(store: Store, payload: Any, ts: float) -> None:
    event = store.append_event(payload.event_type, data=payload.model_dump(mode="json"))
    store.flush()
    stamps = sqlite3.connect(store.path)  # the store stamps events now: set the story's time
    with stamps:
        stamps.execute("UPDATE events SET ts = ? WHERE seq = ?", (ts, event.seq))
    stamps.close()


def _write_story(run: RunDir) -> None:
    """Attempt 1 trains steps 1..50 (0.1 s each, one every 0.1 s), steps 21..25 slowed to
    0.5 s by a slow_steps injection; a kill after step 50; attempt 2's first step (41) comes
    4 s later, and it replays 41..50 before training 51..80; its first step is slow, but a
    replay (and inside the outage), so neither replay time nor a slowed step."""
    with Store(run.store) as store:
        for step in range(1, 51):
            store.add_step(_sample(1, step, T0 + step * 0.1, 0.5 if 21 <= step <= 25 else 0.1))
        for step in range(41, 81):  # step 41, slow and inside the kill's effect, is a replay
            store.add_step(_sample(2, step, T0 + 9.0 + (step - 41) * 0.1, 0.5 if step == 41 else 0.1))
        store.flush()
        _event(store, ChaosInjected(chaos_id="s", kind="slow_steps", step=20), T0 + 2.05)
        verdict = ChaosRecovered(chaos_id="s", kind="slow_steps", recovered=True, seconds=0.5)
        _event(store, verdict, T0 + 2.55)
        _event(store, ChaosInjected(chaos_id="k", kind="kill", step=50), T0 + 5.02)
        _event(store, ChaosRecovered(chaos_id="k", kind="kill", recovered=True, seconds=4.0), T0 + 9.01)
        store.update_meta(state="completed", attempt=2)


def test_outage_replay_and_slowed_steps_of_a_story(run: RunDir) -> None:
    _write_story(run)
    with Store(run.store, readonly=True) as store:
        cost = chaos_cost(store)
        report = endurance_report(run, store)
    [restart] = cost.restarts
    assert restart.attempt == 2 and restart.cause == "kill"
    assert restart.outage_s == pytest.approx(4.0)  # step 50 at T0+5.0 to step 41 at T0+9.0
    assert restart.steps_replayed == 10 and restart.replay_s == pytest.approx(0.9)  # 42..50
    assert cost.median_step_s == pytest.approx(0.1)
    assert cost.steps_slowed == 5 and cost.slowed_s == pytest.approx(5 * 0.4)
    assert cost.total_s == pytest.approx(4.0 + 0.9 + 2.0)
    assert report.steps_replayed == 10 and report.chaos_cost == cost
    assert report.chaos_share == pytest.approx(cost.total_s / report.wall_s)
    doc = report.document()
    assert doc["chaos_cost"]["total_s"] == pytest.approx(6.9)
    assert doc["chaos_cost"]["restarts"][0]["outage_s"] == pytest.approx(4.0)
    json.dumps(doc)  # one JSON document
    text = render_markdown(report)
    assert (
        "| chaos cost: outage / replay / aftermath / slowed steps | 4.0 / 0.9 / 0.0 / 2.0 s = 6.9 s (" in text
    )
    assert "| 2 | kill | 4.0 s | 10 | 0.9 s | 0.0 s (0) |" in text
    assert "| total |  | 4.0 s | 10 | 0.9 s | 0.0 s (0) |" in text
    assert "Slowed steps: 5 steps slower than the median (0.100 s)" in text


def test_a_restarts_aftermath_is_its_steps_net_excess_until_the_spare_behind_it_is_ready(run: RunDir) -> None:
    """The story, with a standby: the spare started after attempt 2's first step is ready at
    T0 + 11.45 (``standby_ready``); attempt 2's steps 51..65 come before it (its replays
    41..50 are replay only). Steps 51..55 take 0.6 s (5 x 0.5 s beyond the median) and step
    56 takes 0.05 s (0.05 s under it, which offsets as much): 2.45 s of aftermath. A slow
    step after the spare is ready (step 70) is not the restart's; steps 52 and 53, inside a
    chaos effect too, count once."""
    _write_story(run)
    slow = sqlite3.connect(run.store)
    with slow:
        slow.execute(
            "UPDATE steps SET step_time_s = 0.6 WHERE attempt = 2 AND step IN (51, 52, 53, 54, 55, 70)"
        )
        slow.execute("UPDATE steps SET step_time_s = 0.05 WHERE attempt = 2 AND step = 56")
    slow.close()
    with Store(run.store) as store:
        _event(store, ChaosInjected(chaos_id="n", kind="nan_loss", step=52), T0 + 10.05)
        _event(store, ChaosRecovered(chaos_id="n", kind="nan_loss", recovered=True, seconds=0.3), T0 + 10.35)
        ready = StandbyReady(pid=1, warmup_s=4.0, rss_mib=300.0, idle_cpu_percent=0.0, idle_window_s=5.0)
        _event(store, ready, T0 + 11.45)
    with Store(run.store, readonly=True) as store:
        cost = chaos_cost(store)
        text = render_markdown(endurance_report(run, store))
    [restart] = cost.restarts
    assert restart.steps_aftermath == 15 and restart.aftermath_s == pytest.approx(5 * 0.5 - 0.05)
    assert cost.steps_slowed == 5 and cost.slowed_s == pytest.approx(5 * 0.4)  # 21..25 alone
    assert cost.total_s == pytest.approx(4.0 + 0.9 + 2.45 + 2.0)
    assert "| 2 | kill | 4.0 s | 10 | 0.9 s | 2.5 s (15) |" in text


def test_a_run_without_restarts_or_chaos_costs_nothing(run: RunDir) -> None:
    with Store(run.store) as store:
        for step in range(1, 11):
            store.add_step(_sample(1, step, T0 + step, 0.1 + step / 100))
        store.flush()
    with Store(run.store, readonly=True) as store:
        cost = chaos_cost(store)
    assert cost.restarts == [] and cost.steps_slowed == 0 and cost.total_s == 0.0
    assert "Restarts" not in render_markdown(endurance_report(run, Store(run.store, readonly=True)))


@pytest.mark.slow
async def test_the_report_splits_the_cost_of_a_real_kill(run: RunDir, start, connect, fake_env) -> None:
    _, client = await running_console(start, connect)
    await client.until(lambda m: m.kind == "telemetry" and m.sample.step >= 5, what="step 5")
    ok, _ = await client.answer(Chaos(id="k", request=Kill()))
    await client.until(is_event("chaos_recovered", chaos_id=ok.result["chaos_id"]))

    def replayed_and_beyond() -> EnduranceReport | None:
        """The report once attempt 2 (which starts at step 1 again) passed attempt 1's steps."""
        with Store(run.store, readonly=True) as store:
            tops = dict(store.query("SELECT attempt, MAX(step) FROM steps GROUP BY attempt"))
            return endurance_report(run, store) if tops.get(2, 0) > tops[1] else None

    report = await until(replayed_and_beyond, what="attempt 2 past attempt 1's newest step")
    [restart] = report.chaos_cost.restarts
    assert isinstance(restart, RestartCost) and restart.attempt == 2 and restart.cause == "kill"
    assert restart.outage_s > 0
    assert restart.steps_replayed == report.steps_replayed >= 5
    assert report.chaos_cost.total_s >= restart.outage_s + restart.replay_s > 0
    assert "| 2 | kill |" in render_markdown(report)
