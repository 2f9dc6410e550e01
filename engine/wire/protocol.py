"""The wire protocol between consoles, the supervisor and the trainer.

NDJSON over a Unix socket: one JSON object per line, at most ``MAX_LINE_BYTES``. Each
object has a ``kind`` that selects its model in a discriminated union; one module-level
``TypeAdapter`` per direction validates what arrives.

Conversation::

    client -> Hello(protocol, role, replay_from)      server -> Welcome(supervisor_pid, run_id, state, ...)
                                                      server -> EventMessage* (replay, in seq order)
    client -> Status/Stop/Ping/Replay(id=...)         server -> Ok(id, result) | Error(id, reason)
                                                      server -> Telemetry (coalesced, ~10 Hz)
                                                      server -> Hardware (newest reading, ~0.1 Hz)
                                                      server -> EventMessage (live, seq-numbered)
    trainer -> Hello(role="trainer")
    trainer -> StepReport | TrainerEvent              server -> TrainerCommand

Anything malformed (bad JSON, over-long line, nesting too deep, an integer over 64 bits,
unknown kind, wrong types, wrong version) gets an ``Error`` naming the reason; the server
and its other clients go on. Decoding is total: any bytes give a message or a
``ProtocolError`` (JSON itself is read by ``engine.wire.json_codec``), and a reason quotes at
most a few characters of the input. The integers and booleans declared here take their own
JSON type only: ``true`` or ``1.0`` is no protocol version, and ``1`` no boolean. Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    TypeAdapter,
    ValidationError,
)

from engine.chaos.table import ChaosKindSpec, ChaosRequest
from engine.directive_effect import DirectiveEffect
from engine.domain import (
    DIRECTIVE_FIELDS,
    DirectiveField,
    DirectiveState,
    DirectiveValue,
    Event,
    RunState,
    TelemetrySample,
    Thresholds,
)
from engine.hardware_report import HardwareSnapshot
from engine.rollback import Rollback
from engine.wire import json_codec as wire_json
from engine.wire.framing import (
    MAX_LINE_BYTES,
    STREAM_LIMIT,
    LineTooLong,
    ProtocolError,
    encode,
    read_line,
    wire_size,
)

__all__ = ["MAX_LINE_BYTES", "STREAM_LIMIT", "LineTooLong", "ProtocolError", "encode", "read_line"]

PROTOCOL_VERSION = 1
TELEMETRY_HZ = 10.0  # most telemetry messages per second to one console
# The supervisor's messages carry what a client sent a level or two deeper (a trainer
# event's data inside an event inside a message): they may nest this much more.
SERVER_MAX_DEPTH = wire_json.MAX_DEPTH + 8

REQUEST_ID_MAX = 64  # characters
RequestId = Annotated[str, Field(min_length=1, max_length=REQUEST_ID_MAX)]
Role = Literal["console", "cli", "trainer"]


MAX_REASON_CHARS = 1024  # an operator's reason for a rejection: a sentence or two, for the record


class _Message(BaseModel):
    model_config = ConfigDict(extra="forbid", ser_json_inf_nan="constants")


# ------------------------------------------------------------- client -> supervisor


class Hello(_Message):
    """First line of every connection."""

    kind: Literal["hello"] = "hello"
    protocol: StrictInt
    role: Role = "console"
    client: str = Field("", max_length=128)
    """Free text for logs, e.g. "memtui 0.1.0 console"."""
    replay_from: StrictInt | None = Field(None, ge=0)
    """Send every event with seq > replay_from after the Welcome; None sends none."""
    telemetry: StrictBool = True
    """Stream coalesced telemetry to this client."""


class Status(_Message):
    kind: Literal["status"] = "status"
    id: RequestId


class Stop(_Message):
    """Graceful stop: the trainer finishes its step, checkpoints and exits."""

    kind: Literal["stop"] = "stop"
    id: RequestId
    reason: str = Field("operator", max_length=256)


class Pause(_Message):
    """Hold training at the next optimizer-step boundary (``paused=False``: go on). Nothing
    is lost: the trainer keeps its state in memory and answers stop requests while held."""

    kind: Literal["pause"] = "pause"
    id: RequestId
    paused: StrictBool = True
    reason: str = Field("operator", max_length=256)


class Ping(_Message):
    kind: Literal["ping"] = "ping"
    id: RequestId


class Replay(_Message):
    """Ask again for events with seq > since (e.g. after a gap)."""

    kind: Literal["replay"] = "replay"
    id: RequestId
    since: StrictInt = Field(ge=0)


class StepReport(_Message):
    """Trainer -> supervisor: one optimizer step."""

    kind: Literal["step"] = "step"
    sample: TelemetrySample


class TrainerEvent(_Message):
    """Trainer -> supervisor: something to record; the supervisor numbers and stores it."""

    kind: Literal["trainer_event"] = "trainer_event"
    type: str = Field(min_length=1, max_length=64, pattern=r"^[a-z][a-z0-9_.]*$")
    severity: Literal["info", "warning", "critical"] = "info"
    message: str = Field("", max_length=4096)
    data: dict[str, Any] = Field(default_factory=dict)


# ------------------------------------------------- directives and chaos (console)
# What a directive looks like on the wire (``DirectiveView``, carried in the directive
# events' data under ``"directive"``: ``engine.events``) and the operator's answers to it.


class DirectiveView(_Message):
    """A directive as an operator sees it: what was asked, what the policy allows, why."""

    id: str = Field(min_length=1, max_length=64)
    source: str = Field("", max_length=128)
    """Who proposed it: ``rules``, ``command:...``, ``http:...``, ``operator``."""
    created_at: float
    expires_at: float | None = None
    step: StrictInt = Field(0, ge=0)
    """The step whose telemetry it was based on."""
    requested: dict[DirectiveField, DirectiveValue] = Field(default_factory=dict)
    """What the planner asked for."""
    allowed: dict[DirectiveField, DirectiveValue] = Field(default_factory=dict)
    """What the policy would apply (clamped values differ from ``requested``)."""
    in_effect: dict[DirectiveField, DirectiveValue] = Field(default_factory=dict)
    """Each of its fields' value in effect when it was last judged (once applied: just
    before it was applied): the "from" of its change. Empty in views stored before it."""
    bounds: dict[DirectiveField, tuple[DirectiveValue, DirectiveValue]] = Field(default_factory=dict)
    """Policy bounds per field, ``(low, high)``: the clamp dialog shows them."""
    reasons: list[str] = Field(default_factory=list)
    """The planner's rationale and the policy's reasons, one line each."""
    state: DirectiveState = "pending"
    evidence: list[str] = Field(default_factory=list)
    """The telemetry the planner read to suggest it, one figure a line."""
    effect: DirectiveEffect | None = None
    """Once applied: the steps after against the steps before (loss slope, tokens/s, ...)."""
    rollback: Rollback | None = None
    """A rollback's tag and skip (then ``requested`` is empty): the trainer restarts from the tag."""
    stale_after_step: StrictInt | None = Field(None, ge=0)
    """Past this step the policy refuses it as stale (its ``step`` plus
    ``policy.max_staleness_steps``), and a pending one expires; None in views stored before it."""


class Approve(_Message):
    """Operator: apply a pending directive as the policy allows it."""

    kind: Literal["approve"] = "approve"
    id: RequestId
    directive_id: str = Field(min_length=1, max_length=64)


class Clamp(_Message):
    """Operator: apply a pending directive with edited values (the policy re-checks them)."""

    kind: Literal["clamp"] = "clamp"
    id: RequestId
    directive_id: str = Field(min_length=1, max_length=64)
    values: dict[DirectiveField, StrictInt | StrictFloat]
    """As sent: a bool or a string is refused here, a float for an integer field by the
    directive's own validation (which names the field)."""


class Reject(_Message):
    """Operator: refuse a pending directive, with a reason for the record."""

    kind: Literal["reject"] = "reject"
    id: RequestId
    directive_id: str = Field(min_length=1, max_length=64)
    reason: str = Field("operator", max_length=MAX_REASON_CHARS)


class Propose(_Message):
    """Operator: an operator-authored directive; the policy checks it like any other.

    ``values`` stays loose here so the directive's own validation names a bad field."""

    kind: Literal["propose"] = "propose"
    id: RequestId
    values: dict[str, Any] = Field(default_factory=dict)
    rationale: str = Field("", max_length=2000)
    source: str = Field("operator", min_length=1, max_length=128)
    reset: list[DirectiveField] = Field(default_factory=list, max_length=len(DIRECTIVE_FIELDS))
    """Fields to return to their run default (the supervisor knows it), with ``values``."""


class Chaos(_Message):
    """Operator: inject a failure to rehearse recovery; the kinds and their parameters are
    ``engine.chaos.table`` (``Welcome.chaos`` says which ones this supervisor performs)."""

    kind: Literal["chaos"] = "chaos"
    id: RequestId
    request: ChaosRequest


ClientMessage = Annotated[
    Hello
    | Status
    | Stop
    | Pause
    | Ping
    | Replay
    | StepReport
    | TrainerEvent
    | Approve
    | Clamp
    | Reject
    | Chaos
    | Propose,
    Field(discriminator="kind"),
]

# ------------------------------------------------------------- supervisor -> client


class Welcome(_Message):
    kind: Literal["welcome"] = "welcome"
    protocol: StrictInt = PROTOCOL_VERSION
    run_id: str
    state: RunState
    last_seq: StrictInt = Field(ge=0)
    """Newest event seq in the store when the client joined."""
    supervisor_pid: StrictInt | None = Field(None, ge=1)
    """The process that answers: ``memtui run``/``resume`` check that it is the supervisor
    they started. None from a supervisor that does not say."""
    thresholds: Thresholds | None = None
    """The run's memory and loss-scale levels (``RunConfig.thresholds()``); None from a
    supervisor that does not send them or cannot read its config: the console then uses
    the config models' defaults."""
    chaos: list[ChaosKindSpec] = Field(default_factory=list)
    """The chaos kinds this supervisor performs, with their parameters: what a console offers."""


class Ok(_Message):
    kind: Literal["ok"] = "ok"
    id: RequestId
    result: dict[str, Any] = Field(default_factory=dict)


class Error(_Message):
    kind: Literal["error"] = "error"
    id: str | None = None
    """The request's id when it could be read."""
    reason: str


class EventMessage(_Message):
    kind: Literal["event"] = "event"
    event: Event


class Telemetry(_Message):
    """Newest step sample; ``coalesced`` samples since the last one were not sent."""

    kind: Literal["telemetry"] = "telemetry"
    sample: TelemetrySample
    state: RunState
    coalesced: StrictInt = Field(0, ge=0)


class Hardware(_Message):
    """The newest hardware reading (GPUs, host, the engine's own processes); not durable.

    Sent at the supervisor's ``alerts.hardware_interval_s``; a console that is behind gets
    only the newest one (like telemetry). Readings NVML could not take say why inside."""

    kind: Literal["hardware"] = "hardware"
    snapshot: HardwareSnapshot


class TrainerCommand(_Message):
    """Supervisor -> trainer."""

    kind: Literal["trainer_command"] = "trainer_command"
    command: Literal["stop", "pause", "resume"]
    reason: str = ""


class CoreShare(_Message):
    """Supervisor -> trainer: from the next optimizer-step boundary, leave ``cores`` of the
    host's cores to the supervisor's own CPU work (``engine.supervisor.trainers.core_loans`` says which
    and why); 0 gives training every core again. A trainer on a GPU ignores it."""

    kind: Literal["core_share"] = "core_share"
    cores: StrictInt = Field(ge=0, le=4096)


class InjectChaos(_Message):
    """Supervisor -> trainer: a trainer-side chaos request, applied at the next optimizer-step
    boundary; the trainer says ``chaos_applied`` (same ``chaos_id``) when it takes effect."""

    kind: Literal["inject_chaos"] = "inject_chaos"
    chaos_id: str = Field(min_length=1, max_length=64)
    request: ChaosRequest


class ApplyDirective(_Message):
    """Supervisor -> trainer: apply these admitted values at the next optimizer-step
    boundary. The trainer re-checks them against its own hard limits and echoes what it
    applied in a ``directive_applied`` event."""

    kind: Literal["apply_directive"] = "apply_directive"
    directive_id: str = Field(min_length=1, max_length=64)
    decision_id: str = Field("", max_length=64)
    values: dict[DirectiveField, DirectiveValue]
    resend: bool = False
    """True: not a directive but the values already in effect, sent again to a new trainer
    (``IN_EFFECT_ID``); its echo is no apply of any directive."""


IN_EFFECT_ID = "in-effect"
"""``ApplyDirective.directive_id`` of a re-send of the values in effect (no directive's id:
those start with a letter or digit and are made by ``new_directive_id``)."""


ServerMessage = Annotated[
    Welcome
    | Ok
    | Error
    | EventMessage
    | Telemetry
    | TrainerCommand
    | CoreShare
    | ApplyDirective
    | InjectChaos
    | Hardware,
    Field(discriminator="kind"),
]

CLIENT_ADAPTER: TypeAdapter[ClientMessage] = TypeAdapter(ClientMessage)
SERVER_ADAPTER: TypeAdapter[ServerMessage] = TypeAdapter(ServerMessage)


# ------------------------------------------------------------------------ decoding


def _validate(adapter: TypeAdapter[Any], line: bytes | str, max_depth: int) -> Any:
    size = wire_size(line)
    if size > MAX_LINE_BYTES:
        raise LineTooLong(f"line of {size} bytes (newline included) exceeds the {MAX_LINE_BYTES}-byte limit")
    try:
        raw = wire_json.parse(line, max_depth)
    except wire_json.WireJsonError as err:
        raise ProtocolError(err.reason) from None
    if not isinstance(raw, dict):
        raise ProtocolError(f"a message must be a JSON object, got {type(raw).__name__}")
    request_id = raw.get("id")
    if not (isinstance(request_id, str) and 0 < len(request_id) <= REQUEST_ID_MAX):
        request_id = None  # an Error echoes only an id a request could have carried
    try:
        return adapter.validate_python(raw)
    except ValidationError as err:
        raise ProtocolError(_explain(err, raw), request_id) from None


def _explain(err: ValidationError, raw: dict[str, Any]) -> str:
    """The first problem, naming the field; never more than a few quoted characters of input."""
    first = err.errors(include_url=False, include_input=False)[0]
    kind = wire_json.shown(raw.get("kind"))
    if first["type"] in ("union_tag_invalid", "union_tag_not_found") and len(first["loc"]) <= 1:
        return f"unknown kind {kind}" if "kind" in raw else "missing field 'kind'"
    kind = str(raw.get("kind"))  # a valid tag: one of ours
    if first["type"] == "union_tag_invalid":  # a nested union (a chaos request): name its tags
        where = ".".join(str(p) for p in first["loc"][1:])
        expected = wire_json.shorten(str(first.get("ctx", {}).get("expected_tags", "")), 300)
        return f"{kind}: field {where!r}: unknown kind (choose from {expected})"
    where = wire_json.shorten(_field_path(first["loc"][1:], raw) or "(message)")
    if first["type"] == "extra_forbidden":
        return f"{kind}: unknown field {where!r}"
    return f"{kind}: field {where!r}: {wire_json.shorten(first['msg'], 200)}"


def _field_path(loc: tuple[Any, ...], raw: Any) -> str:
    """``request.bytes`` for pydantic's ``request.ballast.bytes``: a nested union's tag (the
    ``kind`` the input gave) is no field of the message."""
    parts, node = [], raw
    for part in loc:
        if isinstance(node, dict) and node.get("kind") == part and part not in node:
            continue  # the tag pydantic puts in the path
        parts.append(str(part))
        node = node.get(part) if isinstance(node, dict) else None
    return ".".join(parts)


def decode_client(line: bytes | str) -> ClientMessage:
    """Parse a line sent to the supervisor; raises ProtocolError with a reason."""
    return _validate(CLIENT_ADAPTER, line, wire_json.MAX_DEPTH)


def decode_server(line: bytes | str) -> ServerMessage:
    """Parse a line sent by the supervisor; raises ProtocolError with a reason."""
    return _validate(SERVER_ADAPTER, line, SERVER_MAX_DEPTH)


def check_hello(message: ClientMessage) -> Hello:
    """The first message must be a Hello of our protocol version."""
    if not isinstance(message, Hello):
        raise ProtocolError(f"expected hello first, got {message.kind!r}")
    if message.protocol != PROTOCOL_VERSION:
        raise ProtocolError(
            f"protocol version mismatch: client speaks {message.protocol}, "
            f"supervisor speaks {PROTOCOL_VERSION}; upgrade the older side"
        )
    return message
