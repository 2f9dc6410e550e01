"""Directives from proposal to the trainer's echo, and the planners' own troubles."""

from __future__ import annotations

from pydantic import Field

from engine.directive_effect import DirectiveEffect
from engine.domain import Verdict
from engine.events.payload import Payload
from engine.wire.protocol import DirectiveView


class DirectiveRecord(Payload):
    """A directive's view and the policy's verdict, as every directive event carries them."""

    directive: DirectiveView
    verdict: Verdict | None = None
    """The policy's verdict (every writer gives it; a reader needs only the view)."""


class DirectiveProposed(DirectiveRecord):
    event_type = "directive_proposed"


class DirectiveDecided(DirectiveRecord):
    event_type = "directive_decided"


class DirectiveEffectMeasured(DirectiveRecord):
    """An applied directive's effect: the steps after it against as many before."""

    event_type = "directive_effect"
    effect: DirectiveEffect


class DirectivesCarried(Payload):
    """A new trainer connected: approved directives it had not applied are sent to it
    (``kept``), those whose TTL passed meanwhile are expired (``expired``)."""

    event_type = "directives_carried"
    kept: list[str] = Field(default_factory=list)
    expired: list[str] = Field(default_factory=list)


class DirectiveApplied(Payload):
    """The trainer's echo of what it applied; the supervisor records it with the view."""

    event_type = "directive_applied"
    origin = "trainer"
    directive_id: str | None = None
    decision_id: str = ""
    step: int | None = None
    applied: dict[str, float | int] = Field(default_factory=dict)
    refused: dict[str, str] = Field(default_factory=dict)
    """Field -> why the trainer refused it."""
    resend: bool = False
    """The echo of a re-send of the values in effect (``ApplyDirective.resend``): not an apply."""
    directive: DirectiveView | None = None
    """Added by the supervisor when it records the echo."""
    verdict: Verdict | None = None


class DirectivesRateLimited(Payload):
    event_type = "directives_rate_limited"
    severity = "warning"
    source: str
    count: int
    policy_revision: str


class PlannerRestarted(Payload):
    event_type = "planner_restarted"
    severity = "warning"
    source: str
    failures: int
    pid: int | None = None


class PlannerDisabled(Payload):
    event_type = "planner_disabled"
    severity = "critical"
    source: str
    failures: int
    reason: str


class RolledBack(Payload):
    """An approved rollback, performed: the trainer was ended and restarts from ``tag`` with
    the data cursor moved; the tags newer than it are kept aside (``set_aside``), not deleted."""

    event_type = "rolled_back"
    severity = "warning"
    directive_id: str
    tag: str
    tag_step: int
    from_step: int
    """The newest step reported before the rollback."""
    steps_given_up: int
    """``from_step - tag_step``: optimizer steps trained again (on other data)."""
    skip_batches: int
    """Steps of data the resumed run never draws (``engine.rollback``)."""
    set_aside: list[str] = Field(default_factory=list)
    """Tags newer than ``tag``, moved into ``checkpoints/rolled_back/<directive id>/``."""
