"""What ``memtui directives`` reads and prints: the newest view of each directive from the
run's event log, the stored verdicts (the audit trail), and both as lines. Torch-free;
imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

DECISION_PAGE_ROWS = 5000
"""Stored verdicts read per page: memory stays one page however many there are."""


def stored_directives(store_path: Any) -> list[dict[str, Any]]:
    """The newest DirectiveView of every directive in the run's event log, oldest first."""
    from engine.events import DirectiveApplied, DirectiveDecided, DirectiveEffectMeasured, DirectiveProposed
    from engine.run.storage.store import Store

    newest: dict[str, dict[str, Any]] = {}
    if not Path(store_path).exists():
        return []  # a run whose supervisor has not started yet
    with Store(store_path, readonly=True) as store:
        cursor = 0
        while page := store.events_since(cursor, 1000):
            for event in page:
                record = (
                    DirectiveProposed.of(event)
                    or DirectiveDecided.of(event)
                    or DirectiveApplied.of(event)
                    or DirectiveEffectMeasured.of(event)
                )
                view = record.directive if record is not None else None
                if view is not None:
                    newest.pop(view.id, None)  # re-insert: ordered by the latest change
                    newest[view.id] = view.model_dump(mode="json")
            cursor = page[-1].seq
    return list(newest.values())


OPEN_STATES = ("pending", "approved", "clamped")
"""States in which a directive still waits for an operator or a trainer."""


def no_longer_waiting(view: dict[str, Any]) -> dict[str, Any]:
    """A stored view as of now for a run with no live supervisor: one still waiting can no
    longer be decided or applied (a supervisor that was killed could not expire it itself)."""
    if view.get("state") not in OPEN_STATES:
        return view
    why = "expired: its run has no live supervisor (nothing can decide or apply it)"
    return {**view, "state": "expired", "reasons": [*(view.get("reasons") or []), why]}


def print_decisions(store_path: Any, directive_id: str | None, as_json: bool) -> int:
    """Every stored verdict, oldest first, as lines or one JSON list (streamed: a flood leaves
    tens of thousands, read a page at a time); returns how many."""
    from engine.run.storage.store import Store
    from memtui.cli.json_document import stream_json_array

    if not Path(store_path).exists():
        return stream_json_array(()) if as_json else 0
    with Store(store_path, readonly=True) as store:
        rows = _stored_decisions(store, directive_id)
        if as_json:
            return stream_json_array({"row": row_id, **d.model_dump(mode="json")} for row_id, d in rows)
        count = 0
        for _row_id, d in rows:
            print(decision_line(d))
            count += 1
        return count


def _stored_decisions(store: Any, directive_id: str | None) -> Iterator[tuple[int, Any]]:
    cursor = 0
    while page := store.decisions(cursor, DECISION_PAGE_ROWS, directive_id):
        yield from page
        cursor = page[-1][0]


def decision_line(d: Any) -> str:
    """One DecisionRecord as a line: ids, the policy's verdict, the operator's decision (``-``
    for the policy's own rows), the state after it, source, the patch, the reasons."""
    allowed = ", ".join(f"{k}={v:g}" for k, v in d.patch.items()) or "-"
    reasons = "; ".join(d.reasons) or "-"
    operator = f"operator {d.operator}" if d.operator else "-"
    return (
        f"{d.decision_id}  {d.directive_id}  policy {d.verdict:<6} {operator:<16} {d.state:<8} "
        f"{d.source}  {allowed}  {reasons}"
    )


def render(views: list[dict[str, Any]]) -> str:
    """Each view: its id, state, source and step, then its change in the console's words
    (``memtui.directive_phrases``: in effect → new value), reasons, evidence and effect."""
    from engine.directive_effect import DirectiveEffect
    from memtui.directive_phrases import changes_text

    lines = []
    for v in views:
        asked, allowed, now = v.get("requested") or {}, v.get("allowed") or {}, v.get("in_effect") or {}
        change = changes_text(asked, allowed, now, rollback=v.get("rollback"))
        lines.append(f"{v.get('id')}  {v.get('state'):<8}  {v.get('source')}  step {v.get('step')}")
        lines.append(f"    {change}")
        lines.extend(f"    - {reason}" for reason in v.get("reasons") or [])
        lines.extend(f"    evidence: {line}" for line in v.get("evidence") or [])
        if v.get("effect"):
            lines.append(f"    effect {DirectiveEffect.model_validate(v['effect']).describe()}")
    return "\n".join(lines)
