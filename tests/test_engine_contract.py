"""The fake engine cannot drift from the real supervisor: the same conversations, run against
both (``tests/contract_engines.py``), must answer alike.

Compared is what a console can observe, not incidental values: the kinds of the messages a
request brings, in order; the Welcome's fields; the keys and JSON types of each ``Ok``'s
result; that an ``Error`` names the reason; the events a request causes, in order (their
type, and the state a ``state_changed`` goes to), each parsing with its ``engine.events``
model; the run's state after each step (``Status``). The real supervisor is the reference:
where the fake differs, the fake is wrong. No fixed sleeps: every wait is for a message,
and "nothing else happened" is read off a ``Ping`` answered after the request (whatever a
request records is sent before its answer).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from engine.alerts import watch as alert_watch
from engine.chaos.kinds.corrupt_checkpoint import CorruptCheckpoint
from engine.chaos.kinds.numerics import NanLoss
from engine.chaos.kinds.processes import Kill
from engine.chaos.table import KINDS
from engine.domain import RunStatus, Thresholds, Verdict
from engine.events import (
    ChaosApplied,
    ChaosInjected,
    ChaosRecovered,
    DirectiveApplied,
    DirectiveDecided,
    DirectiveProposed,
    TrainerExited,
    TrainerRestarted,
)
from engine.protocol import (
    MAX_LINE_BYTES,
    PROTOCOL_VERSION,
    Approve,
    Chaos,
    Clamp,
    DirectiveView,
    Error,
    Hello,
    Ok,
    Pause,
    Ping,
    Propose,
    Reject,
    Replay,
    ServerMessage,
    Status,
    StepReport,
    Stop,
    TrainerEvent,
)
from tests.contract_engines import (
    FAKE_TRAINER_ENV,
    Console,
    EngineUnderTest,
    FakeUnderTest,
    RealUnderTest,
    error,
    events_of,
    kinds,
    nothing_more,
    ok,
    shape,
    signature,
    signatures,
    state_of,
    typed,
    welcomed,
)
from tests.fakes.run_script import make_sample

pytestmark = pytest.mark.timeout(120)

STARTED = [
    "run_started",
    "state_changed->starting",
    "trainer_launched",
    "trainer_started",
    "state_changed->running",
]
"""What a run's store holds once its first trainer reports, in order."""


@pytest.fixture(params=["fake", "real"])
async def engine(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[EngineUnderTest]:
    for name, value in FAKE_TRAINER_ENV.items():
        monkeypatch.setenv(name, value)
    # The doctor's findings depend on the machine (and may make the policy refuse directives):
    # its first report comes after every conversation here.
    monkeypatch.setattr(alert_watch, "FIRST_DOCTOR_S", 3600.0)
    home = Path(tempfile.mkdtemp(prefix="mtc", dir="/tmp"))  # short: socket paths fit in 107 bytes
    under_test = (FakeUnderTest if request.param == "fake" else RealUnderTest)(home)
    try:
        yield under_test
    finally:
        await under_test.close()
        shutil.rmtree(home, ignore_errors=True)


# ------------------------------------------------------------- hello and replay


async def test_welcome_then_replay_after_the_seq_in_order_without_duplicates(engine: EngineUnderTest) -> None:
    await engine.start()
    first, welcome, replayed = await welcomed(engine, replay_from=0)
    assert welcome.protocol == PROTOCOL_VERSION and welcome.run_id == engine.run.run_id
    assert welcome.supervisor_pid == os.getpid()  # who answers: both engines run in this process
    assert welcome.state == "running" and isinstance(welcome.thresholds, Thresholds)
    assert kinds(replayed) == ["event"] * welcome.last_seq
    assert [e.seq for e in events_of(replayed)] == list(range(1, welcome.last_seq + 1))
    assert signatures(replayed)[: len(STARTED)] == STARTED
    typed(events_of(replayed))

    later, later_welcome, later_replayed = await welcomed(engine, replay_from=2)
    assert later_welcome.last_seq >= welcome.last_seq
    bare, bare_welcome, _ = await welcomed(engine)  # no replay_from: live events only
    await first.answer(Pause(id="p"))  # live events while the later consoles listen
    seen = await later.until_event("state_changed->paused")
    seqs = [e.seq for e in events_of(later_replayed + seen)]
    assert seqs == list(range(3, seqs[-1] + 1))  # after the seq, in order, each once
    live = events_of(await bare.until_event("state_changed->paused"))
    assert [signature(e) for e in live] == ["pause_requested", "run_paused", "state_changed->paused"]
    assert all(e.seq > bare_welcome.last_seq for e in live)


async def test_status_ping_and_replay(engine: EngineUnderTest) -> None:
    await engine.start()
    console, welcome, _ = await welcomed(engine, replay_from=0)
    status = ok(await console.answer(Status(id="s")))
    assert set(status.result) == set(RunStatus.model_fields)
    parsed = RunStatus.model_validate(status.result)
    assert parsed.run_id == engine.run.run_id and parsed.state == "running"
    assert parsed.last_seq >= welcome.last_seq
    pong = ok(await console.answer(Ping(id="p")))
    assert shape(pong.result) == {"time": "float"}
    again = await console.answer(Replay(id="r", since=welcome.last_seq - 2))
    assert kinds(again) == ["event", "event", "ok"]
    assert [e.seq for e in events_of(again)] == [welcome.last_seq - 1, welcome.last_seq]
    assert shape(ok(again).result) == {"replayed": "int"} and ok(again).result["replayed"] == 2


# ---------------------------------------------------------------------- stopping


async def test_stop_goes_through_stopping_to_stopped_and_a_second_stop_changes_nothing(
    engine: EngineUnderTest,
) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    messages = await console.answer(Stop(id="s1"), Stop(id="s2"), Pause(id="p"))  # one write
    assert kinds(messages) == ["event", "event", "ok", "ok", "error"]
    assert signatures(messages) == ["stop_requested", "state_changed->stopping"]
    first, second, pause = messages[2:]
    assert isinstance(first, Ok) and isinstance(second, Ok) and first.id == "s1" and second.id == "s2"
    assert first.result == second.result == {"state": "stopping"}
    assert isinstance(pause, Error) and "the run is stopping" in pause.reason
    ending = await console.until_event("run_ended")
    assert signatures(ending) == ["trainer_finished", "trainer_exited", "state_changed->stopped", "run_ended"]
    typed(events_of(messages + ending))
    status = RunStatus.model_validate(ok(await console.answer(Status(id="s"))).result)
    assert status.state == "stopped" and isinstance(status.exit_reason, str)
    assert ok(await console.answer(Stop(id="s3"))).result == {"state": "stopped"}
    await nothing_more(console, "after-stop")


async def test_pause_and_stop_on_an_ended_run(engine: EngineUnderTest) -> None:
    await engine.start("stopped")
    console, welcome, _ = await welcomed(engine)
    assert welcome.state == "stopped"
    for paused in (True, False):
        refused = error(await console.answer(Pause(id=f"p-{paused}", paused=paused)))
        assert refused.id == f"p-{paused}" and "the run is stopped" in refused.reason
    assert ok(await console.answer(Stop(id="s"))).result == {"state": "stopped"}
    await nothing_more(console, "ended")


# ----------------------------------------------------------------------- pausing


async def test_pause_holds_at_the_trainers_step_boundary_then_continues(engine: EngineUnderTest) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    asked = await console.answer(Pause(id="p1"))
    assert kinds(asked) == ["event", "ok"] and signatures(asked) == ["pause_requested"]
    assert ok(asked).result == {"state": "running", "paused": True}  # not yet held
    held = await console.until_event("state_changed->paused")
    assert signatures(held) == ["run_paused", "state_changed->paused"]  # paused once it holds
    assert await state_of(console) == "paused"
    assert ok(await console.answer(Pause(id="p2"))).result == {"state": "paused", "paused": True}
    await nothing_more(console, "paused-again")

    asked_on = await console.answer(Pause(id="p3", paused=False))
    assert kinds(asked_on) == ["event", "ok"] and signatures(asked_on) == ["continue_requested"]
    assert ok(asked_on).result == {"state": "paused", "paused": False}
    going = await console.until_event("state_changed->running")
    assert signatures(going) == ["run_continued", "state_changed->running"]
    typed(events_of(asked + held + asked_on + going))
    assert await state_of(console) == "running"
    assert ok(await console.answer(Pause(id="p4", paused=False))).result == {
        "state": "running",
        "paused": False,
    }
    await nothing_more(console, "running-again")


# -------------------------------------------------------------------- directives


def directive_answer(answer: Ok) -> tuple[DirectiveView, Verdict]:
    assert shape(answer.result) == {"directive": "dict", "verdict": "dict"}
    return DirectiveView.model_validate(answer.result["directive"]), Verdict.model_validate(
        answer.result["verdict"]
    )


async def propose(console: Console, request_id: str, values: dict[str, Any]) -> DirectiveView:
    messages = await console.answer(Propose(id=request_id, values=values, rationale="contract"))
    assert kinds(messages) == ["event", "ok"] and signatures(messages) == ["directive_proposed"]
    assert DirectiveProposed.of(events_of(messages)[0]) is not None
    view, _ = directive_answer(ok(messages))
    assert view.state == "pending" and view.requested == values
    return view


async def applied(console: Console, directive_id: str) -> tuple[list[ServerMessage], DirectiveApplied]:
    """Messages up to the trainer's echo of ``directive_id``, and the echo."""
    messages = await console.until(
        lambda m: (
            m.kind == "event"
            and m.event.type == "directive_applied"
            and m.event.data["directive_id"] == directive_id
        )
    )
    echo = DirectiveApplied.of(events_of(messages)[-1])
    assert echo is not None and echo.directive is not None and echo.directive.state == "applied"
    return messages, echo


async def test_propose_then_approve_is_applied_by_the_trainer(engine: EngineUnderTest) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    view = await propose(console, "p", {"lr_multiplier": 0.5})
    decided = await console.answer(Approve(id="a", directive_id=view.id))
    assert kinds(decided) == ["event", "ok"] and signatures(decided) == ["directive_decided"]
    assert DirectiveDecided.of(events_of(decided)[0]) is not None
    approved, verdict = directive_answer(ok(decided))
    assert approved.state == "approved" and verdict.admitted
    messages, echo = await applied(console, view.id)
    assert signatures(messages) == ["directive_applied"]
    assert echo.applied == {"lr_multiplier": 0.5}
    again = error(await console.answer(Approve(id="a2", directive_id=view.id)))
    assert again.id == "a2" and "not pending" in again.reason


async def test_a_pending_directive_expires_when_the_run_ends_and_cannot_be_approved(
    engine: EngineUnderTest,
) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    view = await propose(console, "p", {"lr_multiplier": 0.5})
    await console.answer(Stop(id="s"))
    ending = await console.until_event("run_ended")
    assert signatures(ending)[-4:] == [
        "trainer_exited",
        "directive_decided",
        "state_changed->stopped",
        "run_ended",
    ]
    expired = DirectiveDecided.of(events_of(ending)[-3])
    assert expired is not None and expired.directive.id == view.id and expired.directive.state == "expired"
    assert expired.directive.reasons[-1].startswith(
        "expired: the run ended before it was applied (run stopped"
    )
    refused = error(await console.answer(Approve(id="a", directive_id=view.id)))
    assert refused.id == "a" and "can no longer be decided: expired: the run ended" in refused.reason
    late = await console.answer(Propose(id="late", values={"lr_multiplier": 0.5}))
    assert kinds(late) == ["event", "ok"] and signatures(late) == ["directive_decided"]
    rejected, verdict = directive_answer(ok(late))
    assert rejected.state == "rejected" and verdict.reasons[0].startswith("the run has ended (run stopped")


async def test_propose_then_clamp_in_bounds_and_out_of_bounds(engine: EngineUnderTest) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    view = await propose(console, "p1", {"lr_multiplier": 2.0})
    assert view.allowed == {"lr_multiplier": 0.85}  # clamped by the policy to its bound
    clamped = await console.answer(Clamp(id="c1", directive_id=view.id, values={"lr_multiplier": 0.3}))
    assert kinds(clamped) == ["event", "ok"] and signatures(clamped) == ["directive_decided"]
    assert directive_answer(ok(clamped))[0].state == "clamped"
    _, echo = await applied(console, view.id)
    assert echo.applied == {"lr_multiplier": 0.3}

    # Out of bounds: the operator's number is not moved; the policy's re-check rejects it.
    outside = await propose(console, "p2", {"lr_multiplier": 0.5})
    refused = await console.answer(Clamp(id="c2", directive_id=outside.id, values={"lr_multiplier": 0.95}))
    assert kinds(refused) == ["event", "ok"] and signatures(refused) == ["directive_decided"]
    rejected, verdict = directive_answer(ok(refused))
    assert rejected.state == "rejected" and not verdict.admitted and rejected.allowed == {}
    assert any("lr_multiplier 0.95" in reason for reason in rejected.reasons)
    # Nothing went to the trainer: the echo of a later directive comes, and none of it before.
    later = await propose(console, "p3", {"gradient_clip_norm": 1.0})
    await console.answer(Approve(id="a3", directive_id=later.id))
    await applied(console, later.id)
    echoed = [e.data["directive_id"] for e in events_of(console.log) if e.type == "directive_applied"]
    assert echoed == [view.id, later.id]


async def test_propose_then_reject_and_unknown_ids_and_fields(engine: EngineUnderTest) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    view = await propose(console, "p", {"lr_multiplier": 0.5})
    decided = await console.answer(Reject(id="r", directive_id=view.id, reason="not now"))
    assert kinds(decided) == ["event", "ok"] and signatures(decided) == ["directive_decided"]
    rejected, _ = directive_answer(ok(decided))
    assert rejected.state == "rejected" and any("not now" in reason for reason in rejected.reasons)
    for request in (
        Approve(id="u1", directive_id="d-unknown"),
        Clamp(id="u2", directive_id="d-unknown", values={"lr_multiplier": 0.5}),
        Reject(id="u3", directive_id="d-unknown"),
    ):
        unknown = error(await console.answer(request))
        assert unknown.id == request.id and "d-unknown" in unknown.reason
    hostile = error(await console.answer(Propose(id="h", values={"temperature": 1})))
    assert hostile.id == "h" and "temperature" in hostile.reason
    await nothing_more(console, "refused")


# ------------------------------------------------------------------------- chaos


async def test_chaos_kill_trainer_is_recorded_and_the_trainer_restarts(engine: EngineUnderTest) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    asked = await console.answer(Chaos(id="k", request=Kill()))
    assert kinds(asked) == ["event", "ok"] and signatures(asked) == ["chaos_injected"]
    answer = ok(asked)
    assert shape(answer.result) == {"chaos_id": "str", "kind": "str", "pid": "int"}
    chaos = ChaosInjected.of(events_of(asked)[0])
    assert chaos is not None and chaos.kind == "kill" and chaos.pid == answer.result["pid"]
    assert chaos.chaos_id == answer.result["chaos_id"]
    restart = await console.until_event("state_changed->running")
    assert signatures(restart) == [
        "state_changed->restarting",
        "trainer_exited",
        "trainer_restarted",
        "alert",
        "trainer_launched",
        "trainer_started",
        "state_changed->running",
    ]
    events = typed(events_of(restart))
    exited, restarted = TrainerExited.of(events[1]), TrainerRestarted.of(events[2])
    assert exited is not None and exited.returncode == -9 and exited.signal == "SIGKILL"
    assert restarted is not None and restarted.restarts == 1 and restarted.next_attempt == 2
    status = RunStatus.model_validate(ok(await console.answer(Status(id="s"))).result)
    assert (status.state, status.restarts, status.attempt) == ("running", 1, 2)


async def test_a_trainer_kind_is_applied_by_the_trainer_and_recovered(engine: EngineUnderTest) -> None:
    await engine.start()
    console, welcome, _ = await welcomed(engine)
    assert [spec.kind for spec in welcome.chaos] == list(KINDS)  # every kind advertised
    asked = await console.answer(Chaos(id="n", request=NanLoss(steps=1)))
    assert kinds(asked) == ["event", "ok"] and signatures(asked) == ["chaos_injected"]
    answer = ok(asked)
    assert shape(answer.result) == {"chaos_id": "str", "kind": "str", "pid": "null"}
    injected = ChaosInjected.of(events_of(asked)[0])
    assert injected is not None and injected.params == {"steps": 1, "value": "nan"}
    after = typed(events_of(await console.until_event("chaos_recovered")))
    applied = [ChaosApplied.of(e) for e in after if e.type == "chaos_applied"]
    assert [a.chaos_id for a in applied if a is not None] == [answer.result["chaos_id"]]
    recovered = ChaosRecovered.of(after[-1])
    assert recovered is not None and recovered.recovered and recovered.chaos_id == answer.result["chaos_id"]


async def test_unavailable_and_unknown_chaos_are_refused(engine: EngineUnderTest) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    unavailable = error(await console.answer(Chaos(id="c1", request=CorruptCheckpoint())))
    assert unavailable.id == "c1" and "no verified checkpoint" in unavailable.reason
    line = b'{"kind": "chaos", "id": "c2", "request": {"kind": "explode"}}\n'
    unknown = error(await console.answer(line))
    assert unknown.id == "c2" and "request" in unknown.reason
    await nothing_more(console, "chaos")


# ------------------------------------------------------------ what is refused


async def test_bad_lines_are_answered_with_an_error_and_the_conversation_goes_on(
    engine: EngineUnderTest,
) -> None:
    await engine.start()
    console, _, _ = await welcomed(engine)
    malformed = error(await console.answer(b"{not json\n"))
    assert malformed.id is None and "malformed JSON" in malformed.reason
    unknown = error(await console.answer(b'{"kind": "zap", "id": "z"}\n'))
    assert unknown.id == "z" and "unknown kind 'zap'" in unknown.reason
    too_long = error(await console.answer(b'{"kind": "ping", "id": "' + b"x" * MAX_LINE_BYTES + b'"}\n'))
    assert "limit" in too_long.reason
    for message in (StepReport(sample=make_sample(1)), TrainerEvent(type="fake.tick")):
        refused = error(await console.answer(message))
        assert f"{message.kind!r} is accepted only from the trainer" in refused.reason
    again = error(await console.answer(Hello(protocol=PROTOCOL_VERSION)))
    assert "hello already received" in again.reason
    await console.send(b"\n")  # a blank line is no message
    await nothing_more(console, "bad-lines")


@pytest.mark.parametrize(
    ("first", "reason"),
    [
        (Hello(protocol=PROTOCOL_VERSION + 1), "protocol version mismatch"),
        (Ping(id="early"), "expected hello first"),
    ],
    ids=["version-mismatch", "no-hello"],
)
async def test_a_bad_first_line_is_refused_and_the_connection_closed(
    engine: EngineUnderTest, first: Hello | Ping, reason: str
) -> None:
    await engine.start()
    console = await engine.connect(hello=False)
    await console.send(first)
    refused = error(await console.until(lambda m: m.kind == "error"))
    assert reason in refused.reason
    assert await console.at_end()
    _, welcome, _ = await welcomed(engine)  # the engine goes on serving others
    assert welcome.state == "running"
