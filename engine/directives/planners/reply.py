"""An external planner's answer to one telemetry summary, read at the edge.

A planner (a command or an LLM endpoint) answers each summary with one JSON object: the
directive fields it wants changed plus an optional ``rationale`` string and an optional
``evidence`` list of strings (the figures it read), or ``{}`` for nothing. Whatever else it
says (not JSON, not an object, a non-string rationale, deep nesting, numbers over 64 bits,
lone surrogates: ``engine.wire.json_codec``) becomes a ``problem``: a reason the adapter stores as
a rejected proposal. Field values are not judged here: the directive edge and the policy
do that, through the queue.

A reply also says how the ask went (``outcome``): the planner answered (even with
something refused), it failed to answer (no reply by the deadline, a transport or HTTP
error, the command died: the driver backs off a planner that keeps failing), or it was
not asked (a command waiting to be restarted, or disabled). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from engine.wire import json_codec as wire_json

MAX_REPLY_BYTES = 64 * 1024  # one reply; a directive needs a few hundred bytes
SHOWN_CHARS = 120  # of a refused reply quoted in its reason

AskOutcome = Literal["answered", "failed", "not_asked"]


@dataclass(frozen=True)
class PlannerReply:
    """Values to propose (empty: nothing this time), or a problem that refuses the reply."""

    values: dict[str, Any] = field(default_factory=dict)
    rationale: str = ""
    problem: str | None = None
    evidence: list[str] = field(default_factory=list)
    """The figures the planner says it read (the directive edge bounds their number and size)."""
    outcome: AskOutcome = "answered"
    """answered: the planner replied (what it said may still be refused, ``problem``);
    failed: it did not reply (``problem`` says why); not_asked: the adapter did not ask."""


NOT_ASKED = PlannerReply(outcome="not_asked")
"""The adapter did not ask this tick (a command waiting for its restart, or disabled)."""


def refused(problem: str) -> PlannerReply:
    """The planner answered, but its answer is refused for ``problem``."""
    return PlannerReply(problem=problem)


def unanswered(problem: str) -> PlannerReply:
    """The planner did not answer, for ``problem`` (a refusal that counts as a failure)."""
    return PlannerReply(problem=problem, outcome="failed")


def parse_reply(text: str | bytes) -> PlannerReply:
    """One reply's JSON text as values and rationale; never raises."""
    if len(text) > MAX_REPLY_BYTES:
        return refused(f"reply of {len(text)} bytes is over the {MAX_REPLY_BYTES}-byte cap")
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    text = _unfenced(text.strip())
    try:
        raw = wire_json.parse(text)  # hostile nesting, huge numbers, lone surrogates: a reason
    except wire_json.WireJsonError as err:
        return refused(f"reply is not JSON we accept ({err.reason}): {_shown(text)}")
    if not isinstance(raw, dict):
        return refused(f"reply must be a JSON object, got {type(raw).__name__}: {_shown(text)}")
    values = dict(raw)
    rationale = values.pop("rationale", "")
    if not isinstance(rationale, str):
        return refused(f"rationale must be a string, got {type(rationale).__name__}")
    evidence = values.pop("evidence", [])
    if not isinstance(evidence, list) or not all(isinstance(item, str) for item in evidence):
        return refused("evidence must be a list of strings")
    return PlannerReply(values=values, rationale=rationale, evidence=evidence)


def _unfenced(text: str) -> str:
    """LLMs often wrap JSON in a Markdown code fence; take what is inside it."""
    if text.startswith("```") and text.endswith("```") and len(text) >= 6:
        inner = text[3:-3]
        first_newline = inner.find("\n")
        if first_newline >= 0 and inner[:first_newline].strip().isalpha():  # ```json
            inner = inner[first_newline + 1 :]
        return inner.strip()
    return text


def _shown(text: str) -> str:
    return repr(text[:SHOWN_CHARS]) + ("..." if len(text) > SHOWN_CHARS else "")
