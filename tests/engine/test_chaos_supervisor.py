"""Chaos through the real supervisor, with the fake trainer: each kind recorded first, then
done, its recovery judged with the same chaos id; refusals that change and store nothing;
and the seeded schedule."""

from __future__ import annotations

from itertools import islice
from typing import Any

import pytest

from engine.chaos.config import ChaosConfig
from engine.chaos.kinds.consoles import DropConsoles
from engine.chaos.kinds.corrupt_checkpoint import CorruptCheckpoint
from engine.chaos.kinds.hang import Hang
from engine.chaos.kinds.numerics import NanLoss
from engine.chaos.kinds.planner_storm import PlannerStorm
from engine.chaos.kinds.processes import Kill, Preempt
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.checkpoints.manifest import verify_tag
from engine.checkpoints.store import CheckpointStore
from engine.config.config_file import build_run_config
from engine.events import ChaosApplied, ChaosInjected, ChaosRecovered
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.chaos.schedule import schedule
from engine.wire.protocol import Chaos
from tests.engine.checkpoint_samples import FIELDS, writer

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def is_event(kind: str, **data: Any) -> Any:
    def match(message: Any) -> bool:
        return (
            message.kind == "event"
            and message.event.type == kind
            and all(message.event.data.get(k) == v for k, v in data.items())
        )

    return match


async def running_console(start, connect) -> Any:
    running = await start()
    client = await connect()
    await client.recv()  # welcome
    await client.until(lambda m: m.kind == "telemetry", what="a step")
    return running, client


def stored(run: RunDir, kind: str) -> list[Any]:
    with Store(run.store, readonly=True) as store:
        return [e for e in store.events_since(0) if e.type == kind]


async def test_nan_loss_is_sent_to_the_trainer_applied_and_recovered(run: RunDir, start, connect, fake_env):
    _, client = await running_console(start, connect)
    ok, _ = await client.answer(Chaos(id="n", request=NanLoss(steps=4)))
    assert ok.kind == "ok" and ok.result["kind"] == "nan_loss" and ok.result["pid"] is None
    chaos_id = ok.result["chaos_id"]
    recovered, seen = await client.until(is_event("chaos_recovered", chaos_id=chaos_id))
    verdict = ChaosRecovered.of(recovered.event)
    assert verdict is not None and verdict.recovered and verdict.kind == "nan_loss"
    applied = [ChaosApplied.of(m.event) for m in seen if is_event("chaos_applied")(m)]
    assert applied and applied[0] is not None and applied[0].chaos_id == chaos_id
    assert verdict.step is not None and verdict.step >= applied[0].step + 4
    [injected] = [ChaosInjected.of(e) for e in stored(run, "chaos_injected")]
    assert injected is not None and injected.params == {"steps": 4, "value": "nan"}
    assert injected.source == "operator" and injected.step is not None


async def test_a_kill_recovers_when_the_next_attempt_trains(run: RunDir, start, connect, fake_env) -> None:
    _, client = await running_console(start, connect)
    ok, _ = await client.answer(Chaos(id="k", request=Kill()))
    recovered, _ = await client.until(is_event("chaos_recovered", chaos_id=ok.result["chaos_id"]))
    assert recovered.event.data["recovered"] is True and "attempt 2" in recovered.event.data["detail"]


async def test_a_preemption_restarts_when_configured_and_recovers(run: RunDir, start, connect, fake_env):
    run.write_config(
        build_run_config(steps=100000, restart={"on_preemption": True, "backoff_initial_s": 0.1})
    )
    _, client = await running_console(start, connect)
    ok, _ = await client.answer(Chaos(id="p", request=Preempt()))
    assert isinstance(ok.result["pid"], int)
    recovered, seen = await client.until(is_event("chaos_recovered", chaos_id=ok.result["chaos_id"]))
    restarted = [m.event for m in seen if is_event("trainer_restarted")(m)]
    assert recovered.event.data["recovered"] is True, recovered.event.data
    assert restarted and restarted[0].data["cause"].startswith("preempted")


async def test_drop_consoles_closes_every_console_after_the_answer(run: RunDir, start, connect, fake_env):
    _, client = await running_console(start, connect)
    other = await connect()
    await other.recv()
    ok, _ = await client.answer(Chaos(id="d", request=DropConsoles()))
    assert ok.kind == "ok"
    for dropped in (client, other):
        with pytest.raises(EOFError):
            await dropped.until(lambda m: False, what="the connection to close")
    again = await connect(replay_from=0)
    recovered, _ = await again.until(is_event("chaos_recovered", chaos_id=ok.result["chaos_id"]))
    assert recovered.event.data["recovered"] is True
    assert recovered.event.data["detail"] == "2 console connections closed"


async def test_a_planner_storm_is_refused_and_nothing_applied(run: RunDir, start, connect, fake_env) -> None:
    _, client = await running_console(start, connect)
    ok, _ = await client.answer(Chaos(id="s", request=PlannerStorm(count=140)))
    recovered, _ = await client.until(is_event("chaos_recovered", chaos_id=ok.result["chaos_id"]))
    assert recovered.event.data["recovered"] is True
    assert recovered.event.data["detail"].startswith("140 of 140 hostile directives refused")
    with Store(run.store, readonly=True) as store:
        decisions = [d for _, d in store.decisions()]
    assert len(decisions) == 140 and {d.state for d in decisions} == {"rejected"}
    assert not stored(run, "directive_applied")


async def test_corrupting_the_newest_verified_checkpoint(run: RunDir, start, connect, fake_env) -> None:
    _, client = await running_console(start, connect)
    refused, _ = await client.answer(Chaos(id="c0", request=CorruptCheckpoint()))
    assert refused.kind == "error" and "no verified checkpoint" in refused.reason
    checkpoints = CheckpointStore(run.checkpoints)
    for step in (10, 20):
        assert checkpoints.save(step, writer(run.checkpoints, step), FIELDS, 4096).status == "saved"
    sizes = {p: p.stat().st_size for p in (run.checkpoints / "global_step20").rglob("*")}
    ok, _ = await client.answer(Chaos(id="c1", request=CorruptCheckpoint()))
    assert ok.kind == "ok"
    [injected] = [ChaosInjected.of(e) for e in stored(run, "chaos_injected")]
    assert injected is not None and injected.target == "global_step20/mp_rank_00_model_states.pt"
    assert {p: p.stat().st_size for p in sizes} == sizes  # sizes unchanged
    assert verify_tag(run.checkpoints / "global_step20", 20, "quick").ok
    assert "checksum" in (verify_tag(run.checkpoints / "global_step20", 20, "full").problem or "")
    assert verify_tag(run.checkpoints / "global_step10", 10, "full").ok


async def test_bad_chaos_input_is_refused_naming_the_field_and_stores_nothing(
    run: RunDir, start, connect, fake_env
) -> None:
    running, client = await running_console(start, connect)
    for line, named in (
        (b'{"kind": "chaos", "id": "u", "request": {"kind": "explode"}}', "unknown kind"),
        (b'{"kind": "chaos", "id": "n", "request": {"kind": "ballast", "bytes": -5}}', "bytes"),
        (b'{"kind": "chaos", "id": "t", "request": {"kind": "slow_steps", "steps": "x"}}', "steps"),
    ):
        await client.send(line + b"\n")
        error, _ = await client.until(lambda m: m.kind in ("ok", "error"), what="the answer")
        assert error.kind == "error" and named in error.reason, error.reason
    for request in (Hang(rank=99), SlowSteps(rank=1)):  # a 1-rank run: was accepted, then "recovered"
        refused, _ = await client.answer(Chaos(id="r", request=request))
        assert refused.kind == "error", refused
        said = f"rank {request.rank} is not in this run: its ranks are 0 to 0 (-1: every rank)"
        assert refused.reason == f"chaos {request.kind}: {said}"
    assert not stored(run, "chaos_injected")
    running.supervisor.request_stop("test over")
    stopping, _ = await client.answer(Chaos(id="k", request=Kill()))
    assert stopping.kind == "error" and "the run is stopping" in stopping.reason
    assert await running.result() == 0
    assert not stored(run, "chaos_injected")


async def test_the_schedule_attacks_the_drawn_steps_with_the_drawn_kinds(
    run: RunDir, start, connect, fake_env
) -> None:
    chaos = {"kinds": {"nan_loss": 1, "slow_steps": 1}, "every_steps": 15, "seed": 4}
    run.write_config(build_run_config(steps=100000, chaos=chaos))
    _, client = await running_console(start, connect)
    for _ in range(3):
        await client.until(is_event("chaos_recovered"), timeout=60)
    injected = [ChaosInjected.of(e) for e in stored(run, "chaos_injected")][:3]
    drawn = list(islice(schedule(ChaosConfig.model_validate(chaos)), 20))
    for shot in injected:
        assert shot is not None and shot.source == "schedule"
        assert (shot.scheduled_step, shot.kind) in drawn
        assert shot.step is not None and shot.step >= shot.scheduled_step  # type: ignore[operator]
    assert [s.scheduled_step for s in injected] == sorted({s.scheduled_step for s in injected})  # type: ignore[union-attr, type-var]
    verdicts = [ChaosRecovered.of(e) for e in stored(run, "chaos_recovered")]
    assert all(v is not None and v.recovered for v in verdicts)


async def test_a_new_supervisor_judges_a_kill_its_predecessor_left_pending(
    run: RunDir, start, connect, fake_env
) -> None:
    with Store(run.store) as store:  # what a supervisor killed with its whole tree left
        injected = ChaosInjected(chaos_id="c-before", kind="kill", pid=4242, step=7)
        store.append_event(injected.event_type, severity="warning", data=injected.data(), attempt=1)
        store.update_meta(attempt=1, state="running")
    await start()
    client = await connect(replay_from=0)
    recovered, _ = await client.until(is_event("chaos_recovered", chaos_id="c-before"))
    assert recovered.event.data["recovered"] is True and "attempt 2" in recovered.event.data["detail"]


async def test_a_new_supervisor_goes_on_with_the_schedule_after_the_last_scheduled_injection(
    run: RunDir, start, connect, fake_env
) -> None:
    chaos = {"kinds": {"slow_steps": 1}, "every_steps": 10, "seed": 9}
    drawn = list(islice(schedule(ChaosConfig.model_validate(chaos)), 40))
    done = drawn[5]  # what the previous supervisor injected last (its trainer at step 3 after a resume)
    run.write_config(build_run_config(steps=100000, chaos=chaos))
    with Store(run.store) as store:
        injected = ChaosInjected(
            chaos_id="c-old", kind=done.kind, source="schedule", step=done.step, scheduled_step=done.step
        )
        store.append_event(injected.event_type, data=injected.data(), attempt=1)
        recovered = ChaosRecovered(chaos_id="c-old", kind=done.kind, recovered=True, seconds=1.0)
        store.append_event(recovered.event_type, data=recovered.data(), attempt=1)
        store.update_meta(attempt=1, state="running")
    _, client = await running_console(start, connect)
    first, _ = await client.until(is_event("chaos_injected", source="schedule"), timeout=60)
    assert first.event.data["scheduled_step"] == drawn[6].step  # neither repeated nor skipped
