"""Chaos in words: what an injection will do, and what its events say happened.

``what_happens`` is the sentence a confirmation (and ``memtui chaos``) shows before and after
injecting, e.g. "hold 256 MiB of ballast for 50 steps": the kind's own words
(``engine.chaos.kinds``). ``event_line`` is an event
timeline's line for ``chaos_injected``, ``chaos_applied`` and ``chaos_recovered`` (and the
older ``chaos``), built from the typed payload so it reads the same whatever the writer put
in the event's message. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from engine.chaos.table import kind_of, parse_request, values_of
from engine.domain import Event
from engine.events import ChaosApplied, ChaosInjected, ChaosRecovered, LegacyChaos
from memtui.formatting import format_duration
from memtui.run_facts import RunFacts


def what_happens(kind: str, values: Mapping[str, Any], run: RunFacts | None = None) -> str:
    """One sentence for injecting ``kind`` with ``values``: missing values are the defaults;
    with the run's facts, what it really does to that run (the kind's ``outcome``); a kind
    this memtui does not know is named with its values."""
    model = kind_of(kind)
    filled = _with_defaults(kind, values)
    if model is None:
        shown = ", ".join(f"{k}={v}" for k, v in filled.items())
        return f"inject {kind}" + (f" ({shown})" if shown else "")
    outcome = model.outcome(filled, run) if run is not None else None
    return outcome if outcome is not None else model.phrase(filled)


def depends_on_the_run(kind: str) -> bool:
    """What ``kind`` does depends on the run's facts (its checkpoints, its restart settings)."""
    model = kind_of(kind)
    return model is not None and model.depends_on_the_run()


def _with_defaults(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    if kind_of(kind) is None:
        return dict(values)
    try:
        return values_of(parse_request(kind, dict(values)))
    except ValidationError:
        return dict(values)  # as recorded; the words show what it was


def title_of(kind: str) -> str:
    model = kind_of(kind)
    return model.title if model is not None else kind


# ------------------------------------------------------------------ the timeline


def event_line(event: Event) -> str | None:
    """The timeline's words for a chaos event; None for any other event (or an unreadable one)."""
    injected = ChaosInjected.of(event)
    if injected is not None:
        at = f" at step {injected.step}" if injected.step is not None else ""
        by = "" if injected.source == "operator" else f" by the {injected.source}"
        doing = what_happens(injected.kind, injected.params)
        return f"chaos {injected.chaos_id} injected{by}{at}: {doing}"
    applied = ChaosApplied.of(event)
    if applied is not None:
        title = title_of(applied.kind)
        return f"chaos {applied.chaos_id} ({title}) took effect from step {applied.first_step}"
    recovered = ChaosRecovered.of(event)
    if recovered is not None:
        return _recovery_line(recovered)
    legacy = LegacyChaos.of(event)
    if legacy is not None:
        pid = f" (pid {legacy.pid})" if legacy.pid is not None else ""
        return f"chaos {legacy.action}{pid}"
    return None


def _recovery_line(r: ChaosRecovered) -> str:
    after = format_duration(r.seconds)
    at = f" at step {r.step}" if r.step is not None else ""
    detail = f": {r.detail}" if r.detail else ""
    verdict = f"recovered after {after}" if r.recovered else f"NOT recovered after {after}"
    return f"chaos {r.chaos_id} ({title_of(r.kind)}) {verdict}{at}{detail}"
