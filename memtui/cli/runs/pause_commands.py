"""``memtui pause | unpause``: hold a live run's training at a step boundary, or let it go on.

Like ``memtui stop``: resolve the run, ask its supervisor, print the answer. The supervisor
answers at once with the state as it is then; the trainer holds at its next optimizer-step
boundary, after which the run's state is ``paused`` (``memtui status`` shows it). Nothing
is lost while paused, and ``memtui stop`` still works.
Torch-free; imports stay lazy so ``memtui --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from memtui.cli.errors import CliError

RUN_HELP = "run id, unique prefix of one, or run directory (default: the newest live run)"


def add_parsers(sub: Any) -> None:
    """Register ``pause`` and ``unpause`` on ``memtui``'s subparsers."""
    pause = sub.add_parser(
        "pause",
        help="hold training at the next step boundary (nothing is lost)",
        description=(
            "Ask the supervisor to hold training at the next optimizer-step boundary. The "
            "trainer keeps its state in memory; 'memtui unpause' lets it go on, 'memtui stop' "
            "still stops it. Exit 1 if the supervisor refuses (e.g. the run has ended)."
        ),
    )
    unpause = sub.add_parser(
        "unpause",
        help="let a paused run go on training",
        description=(
            "Ask the supervisor to let a paused run go on from the step it held at. "
            "Exit 1 if the supervisor refuses (e.g. the run has ended)."
        ),
    )
    for parser, paused in ((pause, True), (unpause, False)):
        parser.add_argument("run", nargs="?", metavar="RUN", help=RUN_HELP)
        parser.add_argument(
            "--json", action="store_true", help="print the supervisor's answer ({state, paused}) as JSON"
        )
        parser.set_defaults(handler=cmd_pause, paused=paused)


def cmd_pause(args: argparse.Namespace) -> int:
    """Send ``Pause(paused=args.paused)`` to the run's supervisor and print its answer."""
    from engine.wire.protocol import Pause
    from memtui.cli.resolver import require_run
    from memtui.client import EngineRefused, EngineUnavailable, new_request_id, request_once

    run = require_run(args.run, live=args.run is None)
    verb = "pause" if args.paused else "unpause"
    if run.supervisor_pid() is None:
        raise CliError(f"{run.run_id}: not running (no supervisor to {verb} it)")
    request = Pause(id=new_request_id(), paused=args.paused, reason=f"memtui {verb}")
    try:
        ok = request_once(run.socket, request, timeout=10.0)
    except EngineRefused as err:
        raise CliError(f"{run.run_id}: the supervisor refused to {verb}: {err.reason}") from None
    except EngineUnavailable as err:
        raise CliError(f"{run.run_id}: {err}") from None
    print(json.dumps(ok.result) if args.json else describe(run.run_id, args.paused, ok.result))
    return 0


def describe(run_id: str, paused: bool, result: dict[str, Any]) -> str:
    """One line for the supervisor's answer ``{"state": ..., "paused": ...}``."""
    state = result.get("state", "?")
    if paused:
        if state == "paused":
            return f"{run_id}: paused"
        return f"{run_id}: pausing (now {state}); the trainer holds at the next step boundary"
    return f"{run_id}: continuing (now {state})"
