"""Chaos in words: what an injection will do, and what its events say happened.

``what_happens`` is the sentence a confirmation (and ``memtui chaos``) shows before and after
injecting, e.g. "hold 256 MiB of ballast for 50 steps". ``event_line`` is an event
timeline's line for ``chaos_injected``, ``chaos_applied`` and ``chaos_recovered`` (and the
older ``chaos``), built from the typed payload so it reads the same whatever the writer put
in the event's message. Pure and torch-free.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from pydantic import ValidationError

from engine.chaos_kinds import EVERY_RANK, REQUESTS, parse_request
from engine.domain import Event
from engine.events import ChaosApplied, ChaosInjected, ChaosRecovered, LegacyChaos
from memtui.formatting import format_bytes, format_duration
from memtui.run_facts import RunFacts


def _steps(n: Any) -> str:
    return "1 step" if n == 1 else f"{n} steps"


def _ballast(v: Mapping[str, Any]) -> str:
    held = "until released" if v.get("steps") == 0 else f"for {_steps(v.get('steps'))}"
    return f"hold {format_bytes(v.get('bytes'))} of ballast {held}"


def _saves(n: Any) -> str:
    return "save" if n == 1 else f"{n} saves"


PHRASES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "ballast": _ballast,
    "release": lambda v: "let go of any ballast the trainer holds",
    "oom": lambda v: f"raise an out-of-memory error in the next step's {v.get('phase')} pass",
    "nan_loss": lambda v: f"make the loss {v.get('value')} for {_steps(v.get('steps'))} (each skipped)",
    "overflow": lambda v: f"overflow the fp16 gradients for {_steps(v.get('steps'))} in a row",
    "spike": lambda v: f"multiply the next step's loss (and its gradients) by {v.get('factor'):g}",
    "slow_steps": lambda v: (
        f"add {v.get('delay_s')} s (+ up to {v.get('jitter_s')} s jitter) to each of the next "
        f"{_steps(v.get('steps'))}"
        + ("" if v.get("rank", EVERY_RANK) == EVERY_RANK else f" of rank {v.get('rank')} alone")
    ),
    "disk_full": lambda v: f"fail the next checkpoint {_saves(v.get('saves'))} as on a full disk",
    "kill": lambda v: "SIGKILL the trainer; the restart policy decides what follows",
    "preempt": lambda v: "send the trainer SIGTERM, as a preempting host does",
    "corrupt_checkpoint": lambda v: "flip bytes in the newest checkpoint's largest file",
    "drop_consoles": lambda v: "close every console connection (they reconnect and replay)",
    "planner_storm": lambda v: f"send {v.get('count')} malformed or out-of-bounds directives at once",
}
"""Kind -> the sentence for its parameter values (defaults filled in)."""


def _kill(v: Mapping[str, Any], run: RunFacts) -> str:
    done = "SIGKILL the trainer"
    if run.max_restarts == 0:
        return f"{done}; restarts are off (restart.max_restarts = 0): the run ends as failed"
    if run.verified_steps:
        newest = run.verified_steps[0]
        return f"{done}; the supervisor restarts it from step {newest}, the newest verified checkpoint"
    if run.on_disk:
        return (
            f"{done}; none of its {run.on_disk} checkpoints verifies: the restarted trainer refuses "
            "a silent fresh start and the run ends (memtui resume --fresh starts over at step 0)"
        )
    return f"{done}; the supervisor restarts it from step 0 (no verified checkpoint yet)"


def _preempt(v: Mapping[str, Any], run: RunFacts) -> str:
    done = "send the trainer SIGTERM, as a preempting host does: it saves a checkpoint and exits"
    if run.on_preemption:
        return f"{done}, and the supervisor restarts it from that checkpoint (restart.on_preemption)"
    return f"{done}, and this run ends there (restart.on_preemption is false; memtui resume goes on)"


def _corrupt(v: Mapping[str, Any], run: RunFacts) -> str:
    steps = run.verified_steps
    if not steps:
        return "flip bytes in the newest checkpoint: there is no verified one, so the supervisor refuses"
    done = f"flip bytes in the largest file of the newest checkpoint (step {steps[0]})"
    if len(steps) > 1:
        return f"{done}; a resume skips it and loads step {steps[1]}, the one before"
    return (
        f"{done}, the only one that verifies: until the next save, a restart finds none and the run "
        "ends (a silent fresh start is refused; memtui resume --fresh starts over at step 0)"
    )


OUTCOMES: dict[str, Callable[[Mapping[str, Any], RunFacts], str]] = {
    "kill": _kill,
    "preempt": _preempt,
    "corrupt_checkpoint": _corrupt,
}
"""Kinds whose outcome depends on the run (its checkpoints, its restart settings): the
sentence for one run, given its facts (``memtui.run_facts``)."""


def what_happens(kind: str, values: Mapping[str, Any], run: RunFacts | None = None) -> str:
    """One sentence for injecting ``kind`` with ``values``: missing values are the defaults;
    with the run's facts, what it really does to that run; a kind this memtui has no words
    for is named with its values."""
    filled = _with_defaults(kind, values)
    outcome = OUTCOMES.get(kind)
    if outcome is not None and run is not None:
        return outcome(filled, run)
    phrase = PHRASES.get(kind)
    if phrase is not None:
        return phrase(filled)
    shown = ", ".join(f"{k}={v}" for k, v in filled.items())
    return f"inject {kind}" + (f" ({shown})" if shown else "")


def _with_defaults(kind: str, values: Mapping[str, Any]) -> dict[str, Any]:
    if kind not in REQUESTS:
        return dict(values)
    try:
        return parse_request(kind, dict(values)).model_dump(mode="json", exclude={"kind"})
    except ValidationError:
        return dict(values)  # as recorded; the words show what it was


def title_of(kind: str) -> str:
    model = REQUESTS.get(kind)
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
        return f"chaos {applied.chaos_id} ({title_of(applied.kind)}) took effect at step {applied.step}"
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
