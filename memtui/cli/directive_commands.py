"""``memtui directives | approve | reject | clamp | propose``: directives from the shell.

``directives`` reads the run's store, so it works on a finished run too (where a directive
the store still has waiting is shown expired: no supervisor is left to decide or apply it);
with ``--decisions`` it lists every stored verdict (the audit trail, a flood's included).
The others ask the live supervisor, whose policy judges every value (the CLI only parses
``field=value``).
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from memtui.cli.errors import CliError

DECISION_PAGE_ROWS = 5000
"""Stored verdicts read per page: memory stays one page however many there are."""


def add_parsers(sub: Any) -> None:
    """Register the five commands on ``memtui``'s subparsers."""
    listing = sub.add_parser(
        "directives",
        help="list a run's directives: requested, allowed, state and reasons",
        description="Every directive a planner or operator proposed, newest last, as stored.",
    )
    listing.add_argument(
        "run", nargs="?", metavar="RUN", help="run id, prefix or directory (default: newest)"
    )
    listing.add_argument("--json", action="store_true", help="print a JSON list of DirectiveViews")
    listing.add_argument("--pending", action="store_true", help="only those waiting for an operator")
    listing.add_argument(
        "--decisions",
        action="store_true",
        help="list every policy verdict instead (one per line, oldest first: decision id, directive,"
        " verdict, resulting state, source, reasons), rate-limited ones included; with --json,"
        " one JSON list of them ([] when there are none)",
    )
    listing.add_argument(
        "--directive", metavar="ID", help="with --decisions: only the verdicts on this directive"
    )
    listing.set_defaults(handler=cmd_directives)

    approve = sub.add_parser("approve", help="approve a pending directive (the policy re-checks it)")
    approve.add_argument("directive_id", metavar="ID")
    _add_run_option(approve)
    approve.set_defaults(handler=cmd_approve)

    reject = sub.add_parser("reject", help="reject a pending directive")
    reject.add_argument("directive_id", metavar="ID")
    reject.add_argument("--reason", required=True, metavar="TEXT", help="why, for the record")
    _add_run_option(reject)
    reject.set_defaults(handler=cmd_reject)

    clamp = sub.add_parser("clamp", help="apply a pending directive with edited values (re-checked)")
    clamp.add_argument("directive_id", metavar="ID")
    _add_set(clamp)
    _add_run_option(clamp)
    clamp.set_defaults(handler=cmd_clamp)

    propose = sub.add_parser("propose", help="propose a directive as the operator (policy-checked)")
    propose.add_argument(
        "run", nargs="?", metavar="RUN", help="run id, prefix or directory (default: newest live)"
    )
    _add_set(propose)
    propose.add_argument("--rationale", default="", metavar="TEXT", help="why, for the record")
    propose.set_defaults(handler=cmd_propose)


def _add_run_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", metavar="RUN", help="run id, prefix or directory (default: newest live)")


def _add_set(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--set",
        dest="values",
        action="append",
        required=True,
        metavar="FIELD=VALUE",
        help="lr_multiplier, gradient_clip_norm, loss_scale_initial_power or micro_batch_size",
    )


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["lr_multiplier=0.5", "micro_batch_size=4"]`` -> values; JSON numbers only."""
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise CliError(f"--set {item!r}: expected FIELD=VALUE", code=2)
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise CliError(f"--set {item!r}: {text!r} is not a number", code=2) from None
        values[name.strip()] = value
    return values


# ----------------------------------------------------------------------- commands


def cmd_directives(args: argparse.Namespace) -> int:
    from memtui.cli.json_document import print_json
    from memtui.cli.resolver import require_run

    run = require_run(args.run, live=False, prefer_live=True)
    if args.decisions:
        if not print_decisions(run.store, args.directive, args.json) and not args.json:
            print(f"{run.run_id}: no verdicts stored", file=sys.stderr)
        return 0
    views = stored_directives(run.store)
    if run.supervisor_pid() is None:
        views = [no_longer_waiting(v) for v in views]
    if args.pending:
        views = [v for v in views if v["state"] == "pending"]
    if args.json:
        print_json(views)
    elif not views:
        print(f"{run.run_id}: no directives", file=sys.stderr)
    else:
        print(render(views))
    return 0


def cmd_approve(args: argparse.Namespace) -> int:
    from engine.protocol import Approve

    return _ask(args.run, lambda rid: Approve(id=rid, directive_id=args.directive_id))


def cmd_reject(args: argparse.Namespace) -> int:
    from engine.protocol import Reject

    return _ask(args.run, lambda rid: Reject(id=rid, directive_id=args.directive_id, reason=args.reason))


def cmd_clamp(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from engine.protocol import Clamp

    values = parse_assignments(args.values)
    try:
        Clamp(id="x", directive_id=args.directive_id, values=values)
    except ValidationError as err:
        raise CliError(f"clamp: {err.errors()[0]['loc'][-1]}: {err.errors()[0]['msg']}", code=2) from None
    return _ask(args.run, lambda rid: Clamp(id=rid, directive_id=args.directive_id, values=values))


def cmd_propose(args: argparse.Namespace) -> int:
    from engine.protocol import Propose

    values = parse_assignments(args.values)
    return _ask(args.run, lambda rid: Propose(id=rid, values=values, rationale=args.rationale))


def _ask(spec: str | None, build: Any) -> int:
    """Send one request to the live supervisor; print the directive it answers with."""
    from memtui.cli.resolver import require_run
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once

    run = require_run(spec, live=spec is None)
    if run.supervisor_pid() is None:
        raise CliError(f"{run.run_id}: not running (directives need a live supervisor)")
    try:
        ok = request_once(run.socket, build(new_request_id()), timeout=10.0)
    except EngineRefused as err:
        raise CliError(f"{run.run_id}: refused: {err.reason}") from None
    except EngineUnavailable as err:
        raise CliError(f"{run.run_id}: {err}") from None
    view = ok.result.get("directive", {})
    print(render([view]))
    return 0 if view.get("state") not in ("rejected", "expired") else 1


# ------------------------------------------------------------------------ reading


def stored_directives(store_path: Any) -> list[dict[str, Any]]:
    """The newest DirectiveView of every directive in the run's event log, oldest first."""
    from engine.events import DirectiveApplied, DirectiveDecided, DirectiveEffectMeasured, DirectiveProposed
    from engine.run.store import Store

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
    from engine.run.store import Store
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
    """One DecisionRecord as a line: ids, verdict, state, source, the patch, the reasons."""
    allowed = ", ".join(f"{k}={v:g}" for k, v in d.patch.items()) or "-"
    reasons = "; ".join(d.reasons) or "-"
    return f"{d.decision_id}  {d.directive_id}  {d.verdict:<6} {d.state:<8} {d.source}  {allowed}  {reasons}"


def render(views: list[dict[str, Any]]) -> str:
    from engine.domain import DirectiveEffect

    lines = []
    for v in views:
        asked = ", ".join(f"{k}={val:g}" for k, val in (v.get("requested") or {}).items()) or "-"
        allowed = ", ".join(f"{k}={val:g}" for k, val in (v.get("allowed") or {}).items()) or "-"
        lines.append(f"{v.get('id')}  {v.get('state'):<8}  {v.get('source')}  step {v.get('step')}")
        lines.append(f"    requested {asked}; allowed {allowed}")
        lines.extend(f"    - {reason}" for reason in v.get("reasons") or [])
        lines.extend(f"    evidence: {line}" for line in v.get("evidence") or [])
        if v.get("effect"):
            lines.append(f"    effect {DirectiveEffect.model_validate(v['effect']).describe()}")
    return "\n".join(lines)
