"""What the console asks before each request that changes the run, and the request itself.

Pure: each function returns a ``Question`` (its title, its body as content markup, the yes
button's word, the request sent on yes and the notification its answer makes), or, for the
answers that need no question (a clamp, a reject: their form is the question), the request.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from textual.markup import escape

from engine.chaos.table import ChaosKindSpec
from engine.domain import DirectiveField
from engine.wire.protocol import Approve, Chaos, Clamp, DirectiveView, Ok, Propose, Reject, Stop
from memtui.chaos.chaos_phrases import what_happens
from memtui.chaos.chaos_values import describe_values, request_values
from memtui.client import Request, new_request_id
from memtui.console.directive_text import FIELD_LABELS, render_changes
from memtui.run_facts import RunFacts

REQUEST_REASON = "operator (console)"
"""The reason a stop or a pause from the console carries into the run's events."""


@dataclass(frozen=True)
class Question:
    """A yes/no question and the request a yes sends."""

    title: str
    body: str
    """Content markup."""
    yes: str
    """The yes button's word."""
    request: Request
    done: str | Callable[[Ok], str]
    """The notification on success, or how to make it from the answer."""


def stop(run_id: str) -> Question:
    body = f"Stop {run_id}? The trainer finishes its step, checkpoints and exits."
    request = Stop(id=new_request_id(), reason=REQUEST_REASON)
    return Question("Stop the run", body, "Stop", request, "stopping")


def approve(d: DirectiveView) -> Question:
    request = Approve(id=new_request_id(), directive_id=d.id)
    body = f"Apply as the policy allows it:\n{render_changes(d)}"
    return Question(f"Approve {d.id}", body, "Approve", request, f"{d.id} approved")


def clamp(d: DirectiveView, values: dict[DirectiveField, float | int]) -> Clamp:
    return Clamp(id=new_request_id(), directive_id=d.id, values=values)  # type: ignore[arg-type]


def reject(d: DirectiveView, reason: str) -> Reject:
    return Reject(id=new_request_id(), directive_id=d.id, reason=reason)


def reset_field(field: str, run_id: str) -> Question:
    label = FIELD_LABELS.get(field, field)
    body = (
        f"Propose {escape(label)} back at {escape(run_id)}'s configured default, in one "
        "directive. The policy checks it (a return to the default may go beyond its bounds) and "
        "it waits for your approval like any other."
    )
    request = Propose(id=new_request_id(), reset=[field], rationale="reset from the console")  # type: ignore[list-item]
    return Question(f"Reset {label}", body, "Propose", request, f"{label} back to the run default: proposed")


def roll_back(tag: str, skip_batches: int, run_id: str) -> Question:
    body = (
        f"Propose a rollback of {escape(run_id)} to {escape(tag)}, skipping "
        f"{skip_batches} steps of data after it. The policy checks it (the tag verifies, it is "
        "recent enough) and it waits for your approval; approved, the trainer restarts from the "
        "tag and the newer checkpoints are kept aside."
    )
    values = {"rollback": {"tag": tag, "skip_batches": skip_batches}}
    request = Propose(id=new_request_id(), values=values, rationale="rollback from the console")
    return Question(f"Roll back to {tag}", body, "Propose", request, f"rollback to {tag}: proposed")


def chaos(spec: ChaosKindSpec, request: Chaos, facts: RunFacts | None, run_id: str) -> Question:
    """What the kind will do to this run (``facts``: its checkpoints, where that matters)."""
    values = request_values(request.request)
    doing = what_happens(request.request.kind, values, facts)
    shown = describe_values(spec, values)
    body = (
        f"Inject [b]{escape(spec.title)}[/b] into {escape(run_id)}: "
        f"{escape(doing)}.\n\n[$text-muted]{escape(spec.description)}"
        + (f"\n{escape(request.request.kind)}: {escape(shown)}" if shown else "")
        + "[/]"
    )

    def answered(ok: Ok) -> str:
        return f"{ok.result.get('chaos_id', '?')} injected: {doing}"

    return Question(f"Chaos: {spec.title}", body, "Inject", request, answered)
