"""Every wire message survives encode -> decode; hostile input only ever raises ProtocolError."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.chaos.kinds.processes import Kill
from engine.config.run_config import RunConfig
from engine.domain import Event, TelemetrySample
from engine.hardware_report import HardwareSnapshot
from engine.wire import protocol
from engine.wire.protocol import (
    Error,
    EventMessage,
    Hello,
    Ok,
    Pause,
    Ping,
    ProtocolError,
    Replay,
    Status,
    StepReport,
    Stop,
    Telemetry,
    TrainerCommand,
    TrainerEvent,
    Welcome,
    decode_client,
    decode_server,
    encode,
)


def _sample(**over: object) -> TelemetrySample:
    fields: dict[str, object] = dict(
        step=7,
        ts=time.time(),
        attempt=2,
        samples=56,
        tokens=7168,
        loss=2.5,
        lr=1e-3,
        grad_norm=0.7,
        loss_scale=65536.0,
        overflow=True,
        overflow_count=1,
        skipped_steps=1,
        step_time_s=0.05,
        tokens_per_s=20480.0,
        mem_allocated=1,
        mem_reserved=2,
        mem_peak=3,
        mem_capacity=4,
        mem_kind="cuda",
        micro_batch=8,
        grad_accum=2,
        world_size=2,
    )
    fields.update(over)
    return TelemetrySample.model_validate(fields)


_EVENT = Event(
    seq=3, ts=1.5, type="checkpoint_saved", severity="warning", message="m", data={"a": [1, 2]}, attempt=1
)

CLIENT_MESSAGES = [
    Hello(protocol=1, role="trainer", client="x", replay_from=5, telemetry=False),
    Hello(protocol=1),
    Status(id="s"),
    Stop(id="t", reason="done"),
    Pause(id="p", paused=False, reason="lunch is over"),
    Ping(id="p"),
    Replay(id="r", since=0),
    StepReport(sample=_sample()),
    TrainerEvent(type="trainer_started", severity="critical", message="hi", data={"pid": 1}),
    protocol.Approve(id="a", directive_id="d-1"),
    protocol.Clamp(id="c", directive_id="d-1", values={"lr_multiplier": 0.5, "micro_batch_size": 4}),
    protocol.Reject(id="j", directive_id="d-1", reason="no"),
    protocol.Chaos(id="k", request=Kill()),
    protocol.Propose(id="o", values={"lr_multiplier": 0.5}, rationale="why", source="operator"),
]
SERVER_MESSAGES = [
    Welcome(run_id="demo-1", state="running", last_seq=9),
    Welcome(run_id="demo-1", state="paused", last_seq=0, thresholds=RunConfig().thresholds()),
    Ok(id="s", result={"state": "stopping", "nested": {"x": [1.5]}}),
    Error(id=None, reason="bad"),
    Error(id="q", reason="bad"),
    EventMessage(event=_EVENT),
    Telemetry(sample=_sample(), state="stopping", coalesced=12),
    TrainerCommand(command="stop", reason="operator"),
    TrainerCommand(command="pause"),
    protocol.CoreShare(cores=1),
    protocol.ApplyDirective(directive_id="d-1", decision_id="x-1", values={"lr_multiplier": 0.5}),
    protocol.InjectChaos(chaos_id="c-1", request=Kill()),
    protocol.Hardware(snapshot=HardwareSnapshot(ts=1.0, nvml="NVML: Driver Not Loaded")),
]


def test_every_message_type_is_covered() -> None:
    client_kinds = {m.kind for m in CLIENT_MESSAGES}
    server_kinds = {m.kind for m in SERVER_MESSAGES}
    union_kinds = lambda adapter: set(adapter.json_schema()["discriminator"]["mapping"])  # noqa: E731
    assert client_kinds == union_kinds(protocol.CLIENT_ADAPTER)
    assert server_kinds == union_kinds(protocol.SERVER_ADAPTER)


@pytest.mark.parametrize("message", CLIENT_MESSAGES, ids=lambda m: m.kind)
def test_client_round_trip(message: object) -> None:
    line = encode(message)  # type: ignore[arg-type]
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_client(line[:-1]) == message


@pytest.mark.parametrize("message", SERVER_MESSAGES, ids=lambda m: m.kind)
def test_server_round_trip(message: object) -> None:
    assert decode_server(encode(message)[:-1]) == message  # type: ignore[arg-type]


def test_welcome_carries_the_runs_thresholds_or_none() -> None:
    config = RunConfig.model_validate(
        {"memory": {"warn": 0.5, "critical": 0.6}, "alerts": {"loss_scale_floor": 8}}
    )
    sent = Welcome(run_id="r", state="running", last_seq=0, thresholds=config.thresholds())
    thresholds = decode_server(encode(sent)[:-1]).thresholds  # type: ignore[union-attr]
    assert (thresholds.memory_warn, thresholds.memory_critical, thresholds.loss_scale_floor) == (
        0.5,
        0.6,
        8.0,
    )
    old = b'{"kind": "welcome", "protocol": 1, "run_id": "r", "state": "running", "last_seq": 0}'
    assert decode_server(old).thresholds is None  # type: ignore[union-attr]  # a supervisor that sends none


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_loss_survives_the_wire(value: float) -> None:
    decoded = decode_server(encode(Telemetry(sample=_sample(loss=value), state="running"))[:-1])
    loss = decoded.sample.loss  # type: ignore[union-attr]
    assert (math.isnan(loss) and math.isnan(value)) or loss == value


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (b"{not json", "malformed JSON"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"kind": "launch_missiles"}', "unknown kind"),
        (b'{"id": "x"}', "missing field 'kind'"),
        (b'{"kind": "status", "id": 5}', "status: field 'id'"),
        (b'{"kind": "ping", "id": "p", "extra": 1}', "unknown field"),
        (b"\xff\xfe", "malformed JSON"),
    ],
)
def test_bad_lines_name_the_reason(line: bytes, reason: str) -> None:
    with pytest.raises(ProtocolError, match=reason):
        decode_client(line)


def test_request_id_is_kept_when_readable() -> None:
    with pytest.raises(ProtocolError) as err:
        decode_client(b'{"kind": "replay", "id": "r7", "since": "soon"}')
    assert err.value.request_id == "r7"


def test_oversized_line_is_refused() -> None:
    with pytest.raises(protocol.LineTooLong):
        decode_client(b" " * (protocol.MAX_LINE_BYTES + 1))


def test_check_hello_names_the_versions() -> None:
    with pytest.raises(ProtocolError, match="version mismatch"):
        protocol.check_hello(Hello(protocol=protocol.PROTOCOL_VERSION + 1))
    with pytest.raises(ProtocolError, match="expected hello"):
        protocol.check_hello(Ping(id="p"))


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=20,
)
_kinds = st.sampled_from(
    [
        "hello",
        "status",
        "stop",
        "ping",
        "replay",
        "step",
        "trainer_event",
        "welcome",
        "ok",
        "error",
        "event",
        "telemetry",
        "trainer_command",
        "nope",
    ]
)
_messageish = st.fixed_dictionaries(
    {"kind": _kinds},
    optional={
        "id": _json,
        "protocol": _json,
        "sample": _json,
        "since": _json,
        "event": _json,
        "reason": _json,
        "state": _json,
        "command": _json,
        "type": _json,
    },
)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_only_raise_protocol_error(data: bytes) -> None:
    for decode in (decode_client, decode_server):
        with contextlib.suppress(ProtocolError):
            decode(data)


@settings(max_examples=300, deadline=None)
@given(st.one_of(_json, _messageish))
def test_arbitrary_json_only_raises_protocol_error(value: object) -> None:
    line = json.dumps(value)
    for decode in (decode_client, decode_server):
        try:
            decode(line)
        except ProtocolError as err:
            assert err.reason


# ------------------------------------------------------------ the line limit, exactly


def _padded_ping(size: int, request_id: str = "p") -> bytes:
    """A ping of exactly ``size`` bytes, its newline included (JSON allows the spaces)."""
    body = b'{"kind": "ping", "id": "%s"}' % request_id.encode()
    return body + b" " * (size - len(body) - 1) + b"\n"


def test_a_line_of_max_line_bytes_with_its_newline_is_accepted_one_more_refused() -> None:
    longest = _padded_ping(protocol.MAX_LINE_BYTES)
    assert len(longest) == protocol.MAX_LINE_BYTES
    assert decode_client(longest) == Ping(id="p")
    assert decode_client(longest[:-1]) == Ping(id="p")  # cut off by the reader: still counted
    over = _padded_ping(protocol.MAX_LINE_BYTES + 1)
    for line in (over, over[:-1], over[:-1].decode()):
        with pytest.raises(protocol.LineTooLong, match=f"{protocol.MAX_LINE_BYTES + 1} bytes"):
            decode_client(line)


@pytest.mark.parametrize("limit", [protocol.STREAM_LIMIT, protocol.MAX_LINE_BYTES], ids=["stream", "larger"])
def test_read_line_takes_max_line_bytes_with_its_newline_and_refuses_one_more(limit: int) -> None:
    async def read() -> list[bytes | str]:
        reader = asyncio.StreamReader(limit=limit)
        reader.feed_data(_padded_ping(protocol.MAX_LINE_BYTES, "a"))
        reader.feed_data(_padded_ping(protocol.MAX_LINE_BYTES + 1, "b"))
        reader.feed_data(b'{"kind": "ping", "id": "c"}\n')
        reader.feed_data(_padded_ping(protocol.MAX_LINE_BYTES + 1, "d")[:-1])  # the last, no newline
        reader.feed_eof()
        seen: list[bytes | str] = []
        while True:
            try:
                line = await protocol.read_line(reader)
            except protocol.LineTooLong:
                seen.append("too long")
                continue
            if line is None:
                return seen
            seen.append(line)

    lines = asyncio.run(read())
    assert [len(x) if isinstance(x, bytes) else x for x in lines] == [
        protocol.MAX_LINE_BYTES - 1,
        "too long",
        len(b'{"kind": "ping", "id": "c"}'),
        "too long",
    ]


# ------------------------------------------------- integers and booleans, strictly


@pytest.mark.parametrize(
    ("line", "field"),
    [
        ('{"kind": "hello", "protocol": true}', "protocol"),
        ('{"kind": "hello", "protocol": 1.0}', "protocol"),
        ('{"kind": "hello", "protocol": "1"}', "protocol"),
        ('{"kind": "hello", "protocol": 1, "replay_from": false}', "replay_from"),
        ('{"kind": "hello", "protocol": 1, "replay_from": 2.0}', "replay_from"),
        ('{"kind": "hello", "protocol": 1, "telemetry": 1}', "telemetry"),
        ('{"kind": "hello", "protocol": 1, "telemetry": "yes"}', "telemetry"),
        ('{"kind": "pause", "id": "p", "paused": 0}', "paused"),
        ('{"kind": "replay", "id": "r", "since": true}', "since"),
        ('{"kind": "replay", "id": "r", "since": 3.0}', "since"),
        ('{"kind": "clamp", "id": "c", "directive_id": "d", "values": {"micro_batch_size": true}}', "values"),
    ],
)
def test_a_client_message_takes_its_own_types_only(line: str, field: str) -> None:
    with pytest.raises(ProtocolError, match=f"field '{field}"):
        decode_client(line)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("protocol", True),
        ("protocol", 1.0),
        ("last_seq", 1.0),
        ("last_seq", False),
        ("supervisor_pid", True),
        ("supervisor_pid", 7.0),
    ],
)
def test_a_welcome_takes_its_own_types_only(field: str, value: object) -> None:
    fields = {"kind": "welcome", "run_id": "r", "state": "running", "last_seq": 0, field: value}
    with pytest.raises(ProtocolError, match=f"welcome: field '{field}'"):
        decode_server(json.dumps(fields))


def test_numbers_still_decode_as_the_trainer_and_consoles_send_them() -> None:
    clamp = decode_client(
        b'{"kind": "clamp", "id": "c", "directive_id": "d", "values": {"lr_multiplier": 1}}'
    )
    assert clamp.values == {"lr_multiplier": 1}  # type: ignore[union-attr]  # an int for a float field
    sent = StepReport(sample=_sample(step=2**40, loss=1, mem_allocated=3 << 30))
    assert decode_client(encode(sent)) == sent


def test_a_welcome_names_the_supervisor_or_nothing() -> None:
    sent = Welcome(run_id="r", state="running", last_seq=0, supervisor_pid=4321)
    assert decode_server(encode(sent)).supervisor_pid == 4321  # type: ignore[union-attr]
    old = b'{"kind": "welcome", "protocol": 1, "run_id": "r", "state": "running", "last_seq": 0}'
    assert decode_server(old).supervisor_pid is None  # type: ignore[union-attr]  # an older supervisor
