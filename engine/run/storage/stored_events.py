"""Stored events of given types, in order, each with its typed payload. Torch-free; read-only."""

from __future__ import annotations

import json
from typing import TypeVar

from engine.domain import Event
from engine.events import Payload
from engine.run.storage.store import Store

P = TypeVar("P", bound=Payload)


def events_of(store: Store, *types: str) -> list[Event]:
    """Every stored event of ``types``, oldest first."""
    rows = store.query(
        "SELECT seq, ts, type, severity, message, data, attempt FROM events"
        f" WHERE type IN ({', '.join('?' * len(types))}) ORDER BY seq",
        types,
    )
    return [
        Event(seq=s, ts=ts, type=t, severity=sev, message=m, data=json.loads(d), attempt=a)
        for s, ts, t, sev, m, d, a in rows
    ]


def payloads_of(store: Store, model: type[P]) -> list[tuple[Event, P]]:
    """``model``'s events with their payloads (a damaged row is left out, never a crash)."""
    return [(e, p) for e in events_of(store, model.event_type) if (p := model.of(e)) is not None]
