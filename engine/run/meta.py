"""The run's own record in the store: its state, how it ended, its attempts and processes.

The store's ``meta`` table holds key -> JSON value; ``RunMeta`` is its typed view, one
field per key. Writing goes through the model (an unknown key or a wrong type is refused);
reading is lenient, so that a store written by another version of memtui still opens: a
key this version does not know is left aside, and so is a value that does not validate
(the field keeps its default). Torch-free.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from engine.domain import RunState

log = logging.getLogger(__name__)


class MetaError(ValueError):
    """A meta write the model refuses: an unknown key or a value of the wrong type."""


class RunMeta(BaseModel):
    """What the supervisor keeps about the run as a whole (the ``meta`` table)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    state: RunState | None = None
    """The run's state as its supervisor last recorded it; None before any supervisor did.
    ``interrupted`` is never stored: status derives it for a run nobody serves."""
    exit_reason: str | None = None
    """How the run ended, in words; cleared when a supervisor takes the run (again)."""
    attempt: int = 0
    """Number of the newest trainer attempt (1-based); 0 before the first launch."""
    restarts: int = 0
    """Trainer restarts after unasked deaths, over the run's whole life."""
    started_at: float | None = None
    """Unix time (s) the first supervisor took the run; kept by later ones."""
    ended_at: float | None = None
    """Unix time (s) of the newest recorded ending."""
    supervisor_pid: int | None = None
    """pid of the supervisor that took the run last (alive or not: see supervisor.pid)."""
    trainer_pid: int | None = None
    """pid of the running attempt's process (torchrun with several ranks); None once ended."""
    hold: bool = False
    """The operator paused training: kept across trainer restarts and supervisor deaths,
    cleared when the run ends."""


META_KEYS = frozenset(RunMeta.model_fields)


def meta_values(fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` validated by RunMeta, as JSON-ready values; raises MetaError naming the key."""
    unknown = sorted(set(fields) - META_KEYS)
    if unknown:
        raise MetaError(f"unknown meta key(s): {', '.join(unknown)} (known: {', '.join(sorted(META_KEYS))})")
    try:
        checked = RunMeta.model_validate(fields)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise MetaError(f"meta {where}: {first['msg']} (got {first.get('input')!r})") from None
    return checked.model_dump(mode="json", include=set(fields))


def meta_from_rows(rows: Iterable[tuple[str, str]]) -> RunMeta:
    """RunMeta from the table's (key, JSON text) rows, leniently (see the module docstring)."""
    values: dict[str, Any] = {}
    for key, text in rows:
        if key not in META_KEYS:
            continue  # written by another version: not ours to read
        try:
            values[key] = json.loads(text)
        except ValueError:
            log.warning("meta %s: not JSON (%r): ignored", key, text[:80])
    while True:
        try:
            return RunMeta.model_validate(values)
        except ValidationError as err:
            bad = {str(e["loc"][0]) for e in err.errors() if e["loc"]}
            if not bad & values.keys():
                raise
            for key in bad & values.keys():
                log.warning("meta %s: %r does not validate: ignored", key, values.pop(key))
