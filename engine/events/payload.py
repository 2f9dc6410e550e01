"""The base of every event payload, the registry of event types and the recorder protocol.

An event in the store and on the wire is ``engine.domain.Event``: a ``type``, a severity, a
line for people and ``data``, a JSON object. Every type has a payload model that says what
its ``data`` holds. Writers build the payload and record it (the supervisor's journal, the
trainer's link); readers ask ``Model.of(event)``, which answers the typed payload, or None
when the event is of another type or its data does not fit (a store written by an older
memtui, a damaged row): a reader never crashes on an event.

Payloads accept keys they do not know (a newer writer may add some) and keep them, so an
event read and written again loses nothing. ``PAYLOADS`` maps each type to its model, and
``Payload.origin`` says who may record it. Torch-free.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.domain import Event, Severity

Origin = Literal["supervisor", "trainer"]
P = TypeVar("P", bound="Payload")

PAYLOADS: dict[str, type[Payload]] = {}
"""Event type -> its payload model, every type memtui records."""


class Payload(BaseModel):
    """The ``data`` of one event type; subclasses name it in ``event_type``."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, ser_json_inf_nan="constants")

    event_type: ClassVar[str]
    origin: ClassVar[Origin] = "supervisor"
    severity: ClassVar[Severity] = "info"
    """The usual severity; a writer may record one instance with another."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "event_type" in cls.__dict__:
            if cls.event_type in PAYLOADS:
                raise TypeError(f"event type {cls.event_type!r} is defined twice")
            PAYLOADS[cls.event_type] = cls

    @classmethod
    def of(cls: type[P], event: Event) -> P | None:
        """This event's payload, or None if it is another type or its data does not fit."""
        if event.type != cls.event_type:
            return None
        try:
            return cls.model_validate(event.data)
        except ValidationError:
            return None

    def data(self) -> dict[str, Any]:
        """The JSON object stored as the event's ``data``."""
        return self.model_dump(mode="json", by_alias=True)


class Recorder(Protocol):
    """What records an event: the supervisor's journal, handed to the parts that raise them."""

    def __call__(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event: ...


def payload_of(event: Event) -> Payload | None:
    """The typed payload of any known event type (None: unknown type or data that does not fit)."""
    model = PAYLOADS.get(event.type)
    return None if model is None else model.of(event)
