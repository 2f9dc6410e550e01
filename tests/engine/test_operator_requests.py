"""The supervisor's answers to the console's operator requests: chaos and directives."""

from __future__ import annotations

from typing import Any

import pytest

from engine.chaos.kinds.memory import Ballast, Oom
from engine.chaos.kinds.numerics import NanLoss
from engine.chaos.kinds.processes import Kill
from engine.chaos.kinds.slow_steps import SlowSteps
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import Approve, Chaos, Clamp, Reject, decode_client, encode

pytestmark = pytest.mark.timeout(60)


def kind(name: str) -> Any:
    return lambda m: m.kind == name


def test_operator_requests_round_trip() -> None:
    for message in (
        Approve(id="a", directive_id="d1"),
        Clamp(id="c", directive_id="d1", values={"lr_multiplier": 0.5, "micro_batch_size": 4}),
        Reject(id="r", directive_id="d1", reason="too eager"),
        Chaos(id="k", request=Kill()),
        Chaos(id="b", request=Ballast(bytes=1 << 20, steps=5)),
    ):
        assert decode_client(encode(message)) == message
    clamp = decode_client(encode(Clamp(id="c", directive_id="d", values={"micro_batch_size": 4})))
    assert isinstance(clamp.values["micro_batch_size"], int)


@pytest.mark.slow
async def test_kill_trainer_records_chaos_and_sigkills_it(run: RunDir, start, connect, fake_env) -> None:
    await start()
    client = await connect()
    await client.recv()
    await client.until(kind("telemetry"))
    ok, before = await client.answer(Chaos(id="k1", request=Kill()))
    assert ok.kind == "ok" and ok.result["kind"] == "kill" and ok.result["chaos_id"]
    exited, seen = await client.until(lambda m: m.kind == "event" and m.event.type == "trainer_exited")
    chaos = [m.event for m in before + seen if m.kind == "event" and m.event.type == "chaos_injected"]
    assert chaos and chaos[0].data["pid"] == ok.result["pid"]
    assert chaos[0].data["chaos_id"] == ok.result["chaos_id"]
    assert exited.event.data["returncode"] == -9
    with Store(run.store, readonly=True) as store:
        assert "chaos_injected" in [e.type for e in store.events_since(0)]


@pytest.mark.slow
async def test_trainer_chaos_without_a_trainer_and_unknown_directives_are_refused_clearly(
    run: RunDir, start, connect, fake_env
) -> None:
    fake_env(no_connect=1)  # its process runs, but no trainer ever connects
    await start()
    client = await connect()
    await client.recv()
    for request in (Oom(), Ballast(), NanLoss(), SlowSteps()):
        error, _ = await client.answer(Chaos(id=f"c-{request.kind}", request=request))
        assert error.kind == "error" and f"chaos {request.kind}: no trainer is running" in error.reason
    for request in (
        Approve(id="a", directive_id="d1"),
        Clamp(id="c", directive_id="d1", values={"lr_multiplier": 0.5}),
        Reject(id="r", directive_id="d1"),
    ):
        error, _ = await client.answer(request)
        assert error.kind == "error" and "no directive 'd1'" in error.reason  # unknown id
    with Store(run.store, readonly=True) as store:
        assert "chaos_injected" not in [e.type for e in store.events_since(0)]  # refusals store nothing
