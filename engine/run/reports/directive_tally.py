"""How many directives a run's store holds, by who decided what: the policy's verdict on each
proposal (allowed, clamped, rejected: they add up to the proposals), the operator's answers
(approved, clamped, rejected) and the trainer's applies.

From the ``decisions`` table (every verdict, a flood's included) and the
``directive_applied`` events. A re-send of the values in effect to a restarted trainer is
no apply (``resend``); each directive counts once however many echoes name it (stores from
before ``resend`` re-sent the values under the last applied directive's id). Rows from
before the ``operator`` column: an operator's approval or clamp is the row whose reasons say
"values set by the operator" (its re-check then), an operator's rejection a rejected state
under a verdict that admitted it. Torch-free.
"""

from __future__ import annotations

import sqlite3

from pydantic import BaseModel, ConfigDict

from engine.run.storage.store import Store

OLD_OPERATOR_REASON = "values set by the operator"
"""What an operator's approval or clamp said in its re-check's reasons, before the column."""


class DirectiveTally(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    proposed: int = 0
    allowed: int = 0
    """Proposals the policy allowed as asked."""
    clamped: int = 0
    """Proposals the policy clamped into its bounds."""
    rejected: int = 0
    """Proposals the policy rejected (rate-limited ones included)."""
    operator_approved: int = 0
    operator_clamped: int = 0
    operator_rejected: int = 0
    applied: int = 0
    """Directives the trainer applied (each once; re-sends after a restart are none)."""


def _operator_of(operator: str | None, verdict: str, state: str, reasons: str) -> str | None:
    """The operator's decision a row records (a row from before the column: inferred)."""
    if operator is not None:
        return operator
    if OLD_OPERATOR_REASON in reasons:
        return {"approved": "approve", "clamped": "clamp"}.get(state, "clamp")
    if state == "rejected" and verdict != "reject":
        return "reject"
    return None


def directive_tally(store: Store) -> DirectiveTally:
    """The counts of ``store`` (a store from before the decisions table: proposals 0)."""
    try:
        has = {row[1] for row in store.query("PRAGMA table_info(decisions)")}
        operator = "operator" if "operator" in has else "NULL"
        rows = store.query(
            f"SELECT directive_id, verdict, state, reasons, {operator} FROM decisions ORDER BY id"
        )
    except sqlite3.OperationalError:
        rows = []
    first: dict[str, str] = {}
    answered: dict[str, set[str]] = {"approve": set(), "clamp": set(), "reject": set()}
    for directive_id, verdict, state, reasons, op in rows:
        first.setdefault(directive_id, verdict)  # the first row of a directive: its proposal
        decided = _operator_of(op, verdict, state, reasons)
        if decided in answered:
            answered[decided].add(directive_id)
    verdicts = list(first.values())
    return DirectiveTally(
        proposed=len(first),
        allowed=verdicts.count("allow"),
        clamped=verdicts.count("clamp"),
        rejected=verdicts.count("reject"),
        operator_approved=len(answered["approve"]),
        operator_clamped=len(answered["clamp"]),
        operator_rejected=len(answered["reject"]),
        applied=_applied(store),
    )


def _applied(store: Store) -> int:
    rows = store.query(
        "SELECT COUNT(DISTINCT COALESCE(json_extract(data, '$.directive_id'), seq)) FROM events"
        " WHERE type = 'directive_applied' AND NOT COALESCE(json_extract(data, '$.resend'), 0)"
        " AND json_extract(data, '$.applied') NOT IN ('{}', 'null')"
    )
    return int(rows[0][0]) if rows else 0
