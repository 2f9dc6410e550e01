"""An operator's directive request (approve, clamp, reject, propose), answered by the queue.

A proposal may name fields to ``reset``: each becomes its run default
(``engine.config.directive_defaults``), which the policy then judges like any value (an operator's
return to a default may go beyond the bounds; nothing else is waived). Torch-free.
"""

from __future__ import annotations

from typing import Any

from engine.config.directive_defaults import run_defaults
from engine.config.run_config import RunConfig
from engine.directives.directive import DirectiveRefused
from engine.directives.queue import DirectiveError, DirectiveQueue
from engine.wire.protocol import Approve, Clamp, Error, Ok, Propose, Reject


def reset_values(config: RunConfig, message: Propose) -> dict[str, Any]:
    """``message.values`` with each field of ``message.reset`` at its run default."""
    defaults = run_defaults(config)
    values = dict(message.values)
    for name in message.reset:
        if name in values:
            raise DirectiveRefused(name, "both set and reset: give one")
        if name not in defaults:
            raise DirectiveRefused(
                name, "the run configures none (no clipping), so no directive can return to it"
            )
        values[name] = defaults[name]
    return values


def answer_request(queue: DirectiveQueue | None, message: Approve | Clamp | Reject | Propose) -> Ok | Error:
    """An operator's directive request, answered; never raises (a bad one is an Error)."""
    if queue is None:
        return Error(id=message.id, reason="directives are not available for this run (no readable run.json)")
    try:
        if isinstance(message, Approve):
            entry = queue.approve(message.directive_id)
        elif isinstance(message, Clamp):
            entry = queue.clamp(message.directive_id, {str(k): v for k, v in message.values.items()})
        elif isinstance(message, Reject):
            entry = queue.reject(message.directive_id, message.reason)
        else:
            entry = queue.propose_raw(reset_values(queue.config, message), message.source, message.rationale)
    except (DirectiveError, DirectiveRefused) as err:
        return Error(id=message.id, reason=str(err))
    view = entry.view()
    return Ok(
        id=message.id,
        result={"directive": view.model_dump(mode="json"), "verdict": entry.verdict.model_dump(mode="json")},
    )
