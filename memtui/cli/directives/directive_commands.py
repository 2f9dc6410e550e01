"""``memtui directives | approve | reject | clamp | propose``: directives from the shell.

``directives`` reads the run's store, so it works on a finished run too (where a directive
the store still has waiting is shown expired: no supervisor is left to decide or apply it);
with ``--decisions`` it lists every stored verdict (the audit trail, a flood's included).
The others ask the live supervisor, whose policy judges every value (the CLI only parses
``field=value``). Every one takes RUN as its first positional, like every other command;
``approve``, ``reject`` and ``clamp`` find the run that holds the id when RUN is left out
(``--run RUN`` still works, deprecated). Exit 0 when the directive ends as the operator
asked (an operator's rejection included), 1 when the policy refused it or it expired.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from memtui.cli.errors import CliError

RUN_HELP = "run id, prefix or directory (default: the run that holds ID)"
SUCCEEDED: dict[str, tuple[str, ...]] = {
    "approve": ("approved", "applied"),
    "clamp": ("clamped", "applied"),
    "reject": ("rejected",),
    "propose": ("pending", "approved", "clamped", "applied"),
}
"""The states in which each request did what the operator asked (exit 0)."""


def add_parsers(sub: Any) -> None:
    """Register the five commands on ``memtui``'s subparsers."""
    listing = sub.add_parser(
        "directives",
        help="list a run's directives: each change (in effect → new), state and reasons",
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
        help="list every verdict instead (one per line, oldest first: decision id, directive,"
        " the policy's verdict, the operator's decision, resulting state, source, reasons),"
        " rate-limited ones included; with --json, one JSON list of them ([] when there are none)",
    )
    listing.add_argument(
        "--directive", metavar="ID", help="with --decisions: only the verdicts on this directive"
    )
    listing.set_defaults(handler=cmd_directives)

    approve = _answer_parser(sub, "approve", "approve a pending directive (the policy re-checks it)")
    approve.set_defaults(handler=cmd_approve)
    reject = _answer_parser(sub, "reject", "reject a pending directive")
    reject.add_argument("--reason", required=True, type=reason, metavar="TEXT", help="why, for the record")
    reject.set_defaults(handler=cmd_reject)
    clamp = _answer_parser(sub, "clamp", "apply a pending directive with edited values (re-checked)")
    _add_set(clamp, required=True)
    clamp.set_defaults(handler=cmd_clamp)

    propose = sub.add_parser(
        "propose",
        help="propose a directive as the operator (policy-checked)",
        description="Propose new values (--set) or a return to the run's defaults (--reset), or both "
        "for different fields. The policy judges it like any directive; a return to a field's "
        "default may go beyond the policy's bounds (the run was configured and started there).",
    )
    propose.add_argument(
        "run", nargs="?", metavar="RUN", help="run id, prefix or directory (default: newest live)"
    )
    _add_set(propose, required=False)
    propose.add_argument(
        "--reset",
        action="append",
        default=[],
        metavar="FIELD",
        help="return FIELD to its run default (e.g. lr_multiplier: 1), in one directive",
    )
    propose.add_argument(
        "--rollback",
        metavar="TAG",
        help="roll back to checkpoint TAG (e.g. global_step200): the trainer restarts from it",
    )
    propose.add_argument(
        "--skip-batches",
        type=int,
        default=0,
        metavar="N",
        help="with --rollback: steps of data after TAG never drawn again (the bad window)",
    )
    propose.add_argument(
        "--rationale", default="", type=rationale, metavar="TEXT", help="why, for the record"
    )
    _add_json(propose)
    propose.set_defaults(handler=cmd_propose)


def rationale(text: str) -> str:
    """An argument type: a proposal's rationale, no longer than a directive keeps."""
    from engine.directives.directive import MAX_RATIONALE_CHARS

    if len(text) > MAX_RATIONALE_CHARS:
        raise argparse.ArgumentTypeError(f"at most {MAX_RATIONALE_CHARS} characters, got {len(text)}")
    return text


def reason(text: str) -> str:
    """An argument type: a rejection's reason, no longer than the protocol carries."""
    from engine.wire.protocol import MAX_REASON_CHARS

    if len(text) > MAX_REASON_CHARS:
        raise argparse.ArgumentTypeError(f"at most {MAX_REASON_CHARS} characters, got {len(text)}")
    return text


def directive_id(text: str) -> str:
    """An argument type: a directive id as directives are named (``d-…``, a planner's own)."""
    import re

    from engine.directives.directive import ID_PATTERN, MAX_ID_CHARS

    if len(text) > MAX_ID_CHARS or not re.match(ID_PATTERN, text):
        shown = text if len(text) <= 40 else text[:40] + "…"
        raise argparse.ArgumentTypeError(
            f"{shown!r} is no directive id (letters, digits and _.:- only, at most {MAX_ID_CHARS})"
        )
    return text


def _answer_parser(sub: Any, name: str, help_text: str) -> argparse.ArgumentParser:
    """``memtui NAME [RUN] ID``, with the deprecated ``--run RUN`` still read."""
    parser: argparse.ArgumentParser = sub.add_parser(name, help=help_text)
    parser.add_argument("run", nargs="?", metavar="RUN", help=RUN_HELP)
    parser.add_argument("directive_id", metavar="ID", type=directive_id)
    parser.add_argument("--run", dest="run_option", metavar="RUN", help=argparse.SUPPRESS)
    _add_json(parser)
    return parser


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the answered directive as one JSON object")


def _add_set(parser: argparse.ArgumentParser, *, required: bool) -> None:
    parser.add_argument(
        "--set",
        dest="values",
        action="append",
        required=required,
        default=[],
        metavar="FIELD=VALUE",
        help="lr_multiplier, gradient_clip_norm, loss_scale_initial_power or micro_batch_size",
    )


def check_values(command: str, values: dict[str, Any]) -> None:
    """Judge ``values`` as a directive would be, here, before any supervisor is asked: an
    unknown field, a value that is no number, not finite or outside the field's outer edge,
    a rollback tag that no checkpoint could have, is a CliError (exit 2) naming the field.
    The run's own policy bounds, narrower, are the supervisor's to judge."""
    from engine.directives.directive import DirectiveRefused, parse_directive

    try:
        parse_directive({"id": "check", "source": "operator", "created_at": 0.0, "expires_at": 0.0, **values})
    except DirectiveRefused as err:
        raise CliError(f"{command}: {err}", code=2) from None


MAX_FIELD_CHARS = 64  # longer than any directive field's name: echoed no further


def parse_assignments(items: list[str]) -> dict[str, Any]:
    """``["lr_multiplier=0.5", "micro_batch_size=4"]`` -> values; JSON numbers only."""
    values: dict[str, Any] = {}
    for item in items:
        name, sep, text = item.partition("=")
        shown = repr(item) if len(item) <= 60 else repr(item[:57]) + "..."
        if not sep or not name.strip():
            raise CliError(f"--set {shown}: expected FIELD=VALUE", code=2)
        if len(name) > MAX_FIELD_CHARS:
            raise CliError(
                f"--set {shown}: a field name of {len(name)} characters is no directive field", code=2
            )
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise CliError(f"--set {shown}: the value is not a number", code=2) from None
        values[name.strip()] = value
    return values


# ----------------------------------------------------------------------- commands


def cmd_directives(args: argparse.Namespace) -> int:
    from memtui.cli.directives.directive_listing import (
        no_longer_waiting,
        print_decisions,
        render,
        stored_directives,
    )
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
    from engine.wire.protocol import Approve

    return _answer(args, "approve", lambda rid: Approve(id=rid, directive_id=args.directive_id))


def cmd_reject(args: argparse.Namespace) -> int:
    from engine.wire.protocol import Reject

    return _answer(
        args, "reject", lambda rid: Reject(id=rid, directive_id=args.directive_id, reason=args.reason)
    )


def cmd_clamp(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from engine.wire.protocol import Clamp

    values = parse_assignments(args.values)
    check_values("clamp", values)
    try:
        Clamp(id="x", directive_id=args.directive_id, values=values)
    except ValidationError as err:
        raise CliError(f"clamp: {err.errors()[0]['loc'][-1]}: {err.errors()[0]['msg']}", code=2) from None
    return _answer(args, "clamp", lambda rid: Clamp(id=rid, directive_id=args.directive_id, values=values))


def cmd_propose(args: argparse.Namespace) -> int:
    from pydantic import ValidationError

    from engine.wire.protocol import Propose

    values = parse_assignments(args.values)
    if args.rollback is not None:
        values["rollback"] = {"tag": args.rollback, "skip_batches": args.skip_batches}
    elif args.skip_batches:
        raise CliError("propose: --skip-batches goes with --rollback TAG", code=2)
    if not values and not args.reset:
        raise CliError("propose: give --set FIELD=VALUE, --reset FIELD or --rollback TAG", code=2)
    check_values("propose", values)
    try:
        Propose(id="x", values=values, reset=args.reset)
    except ValidationError as err:
        raise CliError(f"propose: --reset: {err.errors()[0]['msg']}", code=2) from None

    def build(request_id: str) -> Propose:
        return Propose(id=request_id, values=values, rationale=args.rationale, reset=args.reset)

    return _ask(_live_run(args.run, None), build, SUCCEEDED["propose"], as_json=args.json)


def _answer(args: argparse.Namespace, verb: str, build: Callable[[str], Any]) -> int:
    """An operator's answer to directive ``args.directive_id`` in RUN, or in its own run."""
    spec = args.run
    if args.run_option is not None:
        if spec is not None and spec != args.run_option:
            raise CliError(f"{verb}: RUN given twice ({spec!r} and --run {args.run_option!r})", code=2)
        spec = args.run_option  # the deprecated spelling
    return _ask(_live_run(spec, args.directive_id), build, SUCCEEDED[verb], as_json=args.json)


def _live_run(spec: str | None, directive_id: str | None) -> Any:
    """RUN as named; else the run that holds ``directive_id``; else the newest live run.
    It must have a live supervisor."""
    from memtui.cli.directives.directive_owner import owner_of
    from memtui.cli.resolver import require_run

    if spec is not None:
        run = require_run(spec, live=False)
    elif directive_id is not None:
        run = owner_of(directive_id)
    else:
        run = require_run(None, live=True)
    if run.supervisor_pid() is None:
        raise CliError(f"{run.run_id}: not running (directives need a live supervisor)")
    return run


def _ask(run: Any, build: Callable[[str], Any], succeeded: tuple[str, ...], *, as_json: bool = False) -> int:
    """Send one request to ``run``'s supervisor; print the directive it answers with (a line,
    or its JSON view); 0 when it ended in one of the ``succeeded`` states, 2 when the policy
    refused its value (as for any value refused on the command line), else 1."""
    from memtui.cli.directives.directive_listing import render
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once

    try:
        ok = request_once(run.socket, build(new_request_id()), timeout=10.0)
    except EngineRefused as err:
        raise CliError(f"{run.run_id}: refused: {err.reason}") from None
    except EngineUnavailable as err:
        raise CliError(f"{run.run_id}: {err}") from None
    view = ok.result.get("directive", {})
    print(json.dumps(view) if as_json else render([view]))
    state = view.get("state")
    return 0 if state in succeeded else 2 if state == "rejected" else 1
