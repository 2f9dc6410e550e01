"""Decoding is total: any bytes give a message or a ProtocolError with a short reason.

Property tests (hypothesis) against both decoders, the line reader, the trainer's reader
thread and the planner reply parser: arbitrary bytes, mutated valid lines, deep nesting,
huge numbers, NaN and Infinity, huge strings, and valid-but-hostile messages (the right
kind with absurd values, extra fields, wrong types). Whatever a decoder accepts can be
encoded again: the supervisor stores and forwards what it accepted.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.directives.planners.reply import MAX_REPLY_BYTES, parse_reply
from engine.trainer.link import SocketLink
from engine.wire import json_codec as wire_json
from engine.wire import protocol
from engine.wire.protocol import ProtocolError, TrainerCommand, decode_client, decode_server, encode
from tests.engine.test_protocol_messages import CLIENT_MESSAGES, SERVER_MESSAGES

REASON_MAX = 400  # characters: a reason names the problem, it never echoes the input
DECODERS = (decode_client, decode_server)
VALID_LINES = [encode(m)[:-1] for m in CLIENT_MESSAGES + SERVER_MESSAGES]
FAST = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def decodes_or_refuses(decode: Callable[[bytes | str], Any], line: bytes | str) -> None:
    """The property: a message that can be sent on, or a ProtocolError with a short reason."""
    try:
        message = decode(line)
    except ProtocolError as err:
        assert err.reason and len(err.reason) <= REASON_MAX, err.reason[:1000]
        assert err.request_id is None or 0 < len(err.request_id) <= protocol.REQUEST_ID_MAX
        return
    decode(encode(message)[:-1])  # accepted means storable and forwardable


# ------------------------------------------------------------------------ strategies

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30)
)
_json = st.recursive(
    _scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=25,
)
_kinds = st.sampled_from(
    sorted(
        set(protocol.CLIENT_ADAPTER.json_schema()["discriminator"]["mapping"])
        | set(protocol.SERVER_ADAPTER.json_schema()["discriminator"]["mapping"])
    )
    + ["", "nope", "HELLO"]
)


def _nested(depth: int, opener: str, closer: str, inner: str = "1") -> str:
    return opener * depth + inner + closer * depth


_hostile_literals = st.one_of(
    st.integers(min_value=1, max_value=12_000).map(lambda n: "9" * n),  # past int-max-str-digits
    st.integers(min_value=1, max_value=12_000).map(lambda n: "-1" + "0" * n),
    st.integers(min_value=1, max_value=400).map(lambda n: f"1e{n}{n}"),  # float overflow -> inf
    st.sampled_from(["NaN", "Infinity", "-Infinity", "9223372036854775808", "-9223372036854775809"]),
    st.sampled_from(["1e-99999", "0.0000000000000000000000001", "-0", "1E400", "1.5e308"]),
    st.integers(min_value=1, max_value=3000).map(lambda d: _nested(d, "[", "]")),
    st.integers(min_value=1, max_value=3000).map(lambda d: _nested(d, '{"a":', "}")),
    st.integers(min_value=60, max_value=80).map(lambda d: _nested(d, "[", "]")),  # at the limit
    st.integers(min_value=0, max_value=300_000).map(lambda n: json.dumps("x" * n)),
    st.sampled_from(['"\\ud800"', '"\\udfff\\ud800"', '"\\u0000"', '"\\ud83d\\ude00"', '"\u2028"']),
    _json.map(json.dumps),
)


@st.composite
def hostile_messages(draw: st.DrawFn) -> str:
    """The right kind with absurd field values, extra fields or wrong types, as JSON text."""
    base = json.loads(draw(st.sampled_from(VALID_LINES)))
    fields = sorted(base) + ["extra", "kind", "id", "data", "sample", "event", "values"]
    text = json.dumps(base)
    for _ in range(draw(st.integers(min_value=1, max_value=3))):
        field = draw(st.sampled_from(fields))
        literal = draw(_hostile_literals)
        body = text[1:-1]
        text = "{" + (body + ", " if body else "") + json.dumps(field) + ": " + literal + "}"
    return text


@st.composite
def mutated_lines(draw: st.DrawFn) -> bytes:
    """A valid line with bytes flipped, cut, inserted or repeated."""
    line = bytearray(draw(st.sampled_from(VALID_LINES)))
    for _ in range(draw(st.integers(min_value=1, max_value=6))):
        where = draw(st.integers(min_value=0, max_value=max(0, len(line) - 1)))
        action = draw(st.sampled_from(["flip", "cut", "insert", "repeat"]))
        if action == "flip" and line:
            line[where] = draw(st.integers(min_value=0, max_value=255))
        elif action == "cut":
            del line[where:]
        elif action == "insert":
            line[where:where] = draw(st.binary(min_size=1, max_size=8))
        else:
            line[where:where] = line[where : where + 16] * draw(st.integers(min_value=1, max_value=50))
    return bytes(line)


# -------------------------------------------------------------------------- decoders


@FAST
@given(st.binary(max_size=2000))
def test_arbitrary_bytes(data: bytes) -> None:
    for decode in DECODERS:
        decodes_or_refuses(decode, data)


@FAST
@given(mutated_lines())
def test_mutated_valid_lines(line: bytes) -> None:
    for decode in DECODERS:
        decodes_or_refuses(decode, line)


@FAST
@given(hostile_messages())
def test_valid_but_hostile_messages(text: str) -> None:
    for decode in DECODERS:
        decodes_or_refuses(decode, text)
        decodes_or_refuses(decode, text.encode("utf-8", "surrogatepass"))


@FAST
@given(_kinds, st.dictionaries(st.text(max_size=12), _json, max_size=6))
def test_any_fields_under_any_kind(kind: str, fields: dict[str, Any]) -> None:
    line = json.dumps({**fields, "kind": kind})
    for decode in DECODERS:
        decodes_or_refuses(decode, line)


@settings(max_examples=50, deadline=None)
@given(st.text(max_size=200))
def test_text_with_lone_surrogates(text: str) -> None:
    line = json.dumps({"kind": "ping", "id": text}, ensure_ascii=False)  # raw, possibly lone, surrogates
    for decode in DECODERS:
        decodes_or_refuses(decode, line)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
        ('{"kind": "trainer_event", "type": "x", "data": {"a": ' + _nested(70, "[", "]") + "}}", "data.a.0"),
        ('{"kind": "hello", "protocol": ' + "9" * 5000 + "}", "does not fit in 64 bits"),
        ('{"kind": "step", "sample": {"step": ' + "9" * 30 + "}}", "'sample.step'"),
        ('{"kind": "ping", "id": "\\ud800"}', "malformed JSON"),
        ('{"kind": "' + "k" * 500_000 + '"}', "unknown kind 'kkk"),
        ('{"kind": "ping", "id": "p", "' + "x" * 500_000 + '": 1}', "ping: unknown field 'xxx"),
        ('{"kind": "ping", "id": "' + "i" * 500_000 + '"}', "at most 64 characters"),
        ('{"kind": ' + "[1, " * 10_000 + "1" + "]" * 10_000 + "}", "nested deeper than"),
        ('{"kind": "hello", "protocol": NaN}', "'protocol': Input should be a valid integer"),
        ('{"kind": "hello", "protocol": Infinity}', "'protocol': Input should be a valid integer"),
    ],
    ids=lambda v: v[:30] if isinstance(v, str) else v,
)
def test_the_known_escapes_are_refused_with_a_short_reason(line: str, reason: str) -> None:
    for decode in (decode_client,):
        with pytest.raises(ProtocolError) as err:
            decode(line)
        assert reason in err.value.reason and len(err.value.reason) <= REASON_MAX


def test_what_is_accepted_at_the_limits() -> None:
    ok = '{"kind": "trainer_event", "type": "x", "data": {"a": ' + _nested(60, "[", "]") + "}}"
    assert decode_client(ok).data["a"]  # type: ignore[union-attr]
    big = decode_client('{"kind": "replay", "id": "r", "since": 9223372036854775807}')
    assert big.since == 2**63 - 1  # type: ignore[union-attr]
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        decode_client("NaN")


# ------------------------------------------------------------------------ line reader


@settings(max_examples=100, deadline=None)
@given(st.lists(st.binary(max_size=200) | st.just(b"\n"), max_size=30))
def test_read_line_gives_lines_or_line_too_long(chunks: list[bytes]) -> None:
    async def drain() -> list[bytes]:
        reader = asyncio.StreamReader(limit=64)  # a small limit: over-long lines are common here
        for chunk in chunks:
            reader.feed_data(chunk)
        reader.feed_eof()
        lines = []
        while True:
            try:
                line = await protocol.read_line(reader)
            except protocol.LineTooLong as err:
                assert err.reason
                continue
            if line is None:
                return lines
            lines.append(line)

    lines = asyncio.run(drain())
    assert all(b"\n" not in line and len(line) <= 64 for line in lines)


# ---------------------------------------------------------------- the trainer's reader


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=3000) | mutated_lines() | hostile_messages().map(str.encode))
def test_the_trainers_reader_survives_any_bytes(data: bytes) -> None:
    ours, theirs = socket.socketpair()
    link = SocketLink(ours)
    try:
        theirs.sendall(data + b"\n" + encode(TrainerCommand(command="pause")))
        assert link.pause_requested.wait(10), "the reader thread stopped reading"
        theirs.sendall(encode(TrainerCommand(command="stop", reason="after the noise")))
        assert link.stop_requested.wait(10)
        assert link.stop_reason == "after the noise"
    finally:
        link.close()
        theirs.close()


@pytest.mark.parametrize(
    "noise",
    [
        b"[" * (protocol.MAX_LINE_BYTES + 5000) + b"]",  # a runaway line
        b"[" * 100_000 + b"]" * 100_000,  # RecursionError under json.loads
        b'{"kind": "trainer_command", "command": "pause", "reason": ' + b"9" * 5000 + b"}",  # ValueError
    ],
    ids=["runaway", "deep", "huge-int"],
)
def test_the_trainers_reader_survives_the_known_escapes(noise: bytes) -> None:
    ours, theirs = socket.socketpair()
    link = SocketLink(ours)
    try:
        theirs.sendall(noise + b"\n" + encode(TrainerCommand(command="stop", reason="still here")))
        assert link.stop_requested.wait(10)
        assert link.stop_reason == "still here"
    finally:
        link.close()
        theirs.close()


# ------------------------------------------------------------------ planner replies


def _answers(text: str | bytes) -> None:
    reply = parse_reply(text)
    if reply.problem is not None:
        assert len(reply.problem) <= REASON_MAX, reply.problem[:1000]
        assert not reply.values
        return
    assert isinstance(reply.values, dict) and isinstance(reply.rationale, str)
    assert "rationale" not in reply.values
    wire_json.check(reply.values)
    json.dumps(reply.values).encode("utf-8")  # storable as the proposal's record


@FAST
@given(st.binary(max_size=2000) | st.text(max_size=500))
def test_planner_reply_any_text_or_bytes(text: str | bytes) -> None:
    _answers(text)
    if isinstance(text, str):
        _answers(f"```json\n{text}\n```")


@FAST
@given(_hostile_literals | hostile_messages())
def test_planner_reply_hostile_json(text: str) -> None:
    _answers(text)
    _answers('{"lr_multiplier": ' + text + ', "rationale": "why"}')
    _answers('{"rationale": ' + text + "}")
    _answers(text.encode("utf-8", "surrogatepass"))


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("[" * 60_000, "nested deeper than"),
        ("9" * 5000, "does not fit in 64 bits"),
        ('{"lr_multiplier": ' + "1" * 40 + "}", "'lr_multiplier'"),
        ('{"rationale": "\\udc80"}', "not JSON"),
        ("x" * (MAX_REPLY_BYTES + 1), "cap"),
    ],
    ids=lambda v: v[:20],
)
def test_planner_reply_refusals_name_the_problem(text: str, reason: str) -> None:
    problem = parse_reply(text).problem or ""
    assert reason in problem and len(problem) <= REASON_MAX
