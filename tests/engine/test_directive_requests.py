"""Directive requests against the real supervisor (with the fake trainer): propose, approve,
hostile input and a flood of 10,000 proposals, while the supervisor keeps serving and
stores every verdict. (How fast it answers meanwhile is measured in bench/directive_flood.py.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import ApplyDirective, Approve, Ping, Propose
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


async def test_propose_approve_and_hostile_values(run: RunDir, start, connect, fake_env) -> None:
    running = await start()
    client = await connect()
    await client.recv()
    await client.until(lambda m: m.kind == "telemetry")
    ok, _ = await client.answer(Propose(id="p1", values={"lr_multiplier": 2.0}, rationale="hot"))
    assert ok.kind == "ok"
    view = ok.result["directive"]
    assert view["state"] == "pending" and view["allowed"] == {"lr_multiplier": 0.85}
    assert ok.result["verdict"]["decision"] == "clamp"
    for values, field in (
        ({"lr_multiplier": float("nan")}, "lr_multiplier"),
        ({"lr_multiplier": "0.5"}, "lr_multiplier"),
        ({"micro_batch_size": {"n": 4}}, "micro_batch_size"),
        ({"temperature": 1}, "temperature"),
    ):
        error, _ = await client.answer(Propose(id="h", values=values))
        assert error.kind == "error" and field in error.reason
    sent: list[object] = []
    supervisor = running.supervisor
    original = supervisor.directives.send
    supervisor.directives.send = lambda m: sent.append(m) or original(m)
    ok, _ = await client.answer(Approve(id="a1", directive_id=view["id"]))
    assert ok.kind == "ok" and ok.result["directive"]["state"] == "approved"
    assert isinstance(sent[-1], ApplyDirective) and sent[-1].values == {"lr_multiplier": 0.85}
    with Store(run.store, readonly=True) as store:
        types = [e.type for e in store.events_since(0)]
    assert "directive_proposed" in types and "directive_decided" in types


async def test_flood_of_ten_thousand_is_rate_limited_every_verdict_stored_and_ping_answered(
    run: RunDir, start, connect, fake_env
) -> None:
    await start()
    flooder = await connect(telemetry=False)
    watcher = await connect()
    await flooder.recv()
    await watcher.recv()
    await watcher.until(lambda m: m.kind == "telemetry")
    answers: list[object] = []
    for batch in range(20):  # 500 at a time: a flooder that never reads is dropped as too slow
        for i in range(500):
            await flooder.send(Propose(id=f"f{batch}-{i}", values={"lr_multiplier": 0.5}, source="flood"))
        pong, _ = await watcher.answer(Ping(id=f"still-there-{batch}"), timeout=30)
        assert pong.kind == "ok"  # another client is still served between two batches
        while len(answers) < 500 * (batch + 1):
            message = await flooder.recv(timeout=30)
            if message.kind in ("ok", "error"):
                answers.append(message)
    states = [a.result["directive"]["state"] for a in answers if a.kind == "ok"]
    assert states.count("pending") <= 6 and states.count("rejected") >= 10_000 - 32
    _, seen = await watcher.until(lambda m: m.kind == "telemetry")  # telemetry still flows
    rate_limited = 10_000 - states.count("pending")

    def stored() -> tuple[list[Any], list[Any], int]:
        """(events, decisions, proposals the rate-limit summaries counted) in the store."""
        with Store(run.store, readonly=True) as store:
            events = store.events_since(0)
            decisions = [d for _, d in store.decisions()]
        counted = sum(e.data["count"] for e in events if e.type == "directives_rate_limited")
        return events, decisions, counted

    # Decisions are flushed in batches, summaries every 2 s.
    events, decisions, counted = await until(
        lambda: (found := stored())[2] >= rate_limited and len(found[1]) >= 10_000 and found,
        timeout=60,
        what=f"10,000 stored verdicts and summaries counting {rate_limited} rate-limited",
        seen=lambda: (len(stored()[1]), stored()[2]),
    )
    # one stored verdict per proposal; besides, a row for each pending one that the fake
    # trainer's steps made stale meanwhile (it expires then: an approval would be refused)
    verdicts = [d for d in decisions if d.state != "expired"]
    assert len(verdicts) == 10_000 and len(decisions) - len(verdicts) <= states.count("pending")
    assert {d.directive_id for d in decisions} == {a.result["directive"]["id"] for a in answers}
    assert sum(d.rate_limited for d in decisions) == rate_limited
    assert all(d.reasons for d in decisions if d.verdict == "reject")
    # The consoles' stream: the first rejection of a burst in full, then periodic counts.
    assert len([e for e in events if e.type.startswith("directive")]) < 100  # not 10,000
    first = [e for e in events if e.type == "directive_decided" and e.data["verdict"]["rate_limited"]]
    assert first and counted == rate_limited


async def test_an_operators_decision_never_waits_behind_a_flood_of_proposals(
    start, connect, fake_env
) -> None:
    await start()
    flooder = await connect(telemetry=False)
    operator = await connect(telemetry=False)
    await flooder.recv()
    await operator.recv()
    answers: list[str] = []

    async def drain() -> None:  # the flooder reads its answers as they come
        while len(answers) < 1500:
            message = await flooder.recv(timeout=60)
            if message.kind in ("ok", "error"):
                answers.append(message.id)

    for i in range(1500):  # the pace answers 200 at once, then 500/s: ~2.6 s of backlog
        await flooder.send(Propose(id=f"f{i}", values={"lr_multiplier": 0.5}, source="flood"))
    reader = asyncio.create_task(drain())
    answer, _ = await operator.answer(Approve(id="op", directive_id="no-such-directive"), timeout=60)
    flood_answered = len(answers)  # when the operator had its answer
    await reader
    assert answer.kind == "error" and "no-such-directive" in answer.reason
    assert flood_answered < 1500  # served while proposals were still queued, not after them
