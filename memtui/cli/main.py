"""The ``memtui`` command: start, watch, inspect and stop runs.

::

    memtui                      attach to the newest live run, or start the demo and attach
    memtui run [CONFIG.toml]    start a run (detached supervisor), then attach
    memtui attach [RUN]         open the console (read-only history for a finished run)
    memtui serve [RUN]          the console in a browser (textual-serve), read-only by default
    memtui ls | status | logs | stop
    memtui pause [RUN] | unpause [RUN]   hold training at a step boundary / let it go on
    memtui resume [RUN]         start an interrupted run again from its newest verified checkpoint
    memtui checkpoints [RUN]    list checkpoints: step, size, age, verification
    memtui oom [RUN]            list OOMs: step, micro-batch, memory breakdown, allocator snapshot
    memtui doctor [--json]      check this machine: software, GPUs, host; verdict with reasons
    memtui directives [RUN] | approve ID | reject ID | clamp ID | propose [RUN]   planner directives
    memtui chaos [RUN] KIND [--PARAM VALUE ...] | chaos --list   rehearse a failure in a live run

This module only parses, dispatches to the command's handler and turns a ``CliError`` into
its exit status and one line on stderr. The parser is ``memtui.cli.parser``; the commands
live in one module per group (``lifecycle_commands``, ``inspection_commands``,
``directive_commands``, ``pause_commands``, ``doctor_command``, ``chaos_command``).
A command whose flags depend on what it is asked (``chaos``: each kind its own parameters)
takes argparse's leftovers; every other command refuses them as argparse does.
Imports are lazy: ``memtui --help`` must not pay for pydantic, textual or the engine.
"""

from __future__ import annotations

import os
import sqlite3
import sys

from memtui.cli.errors import CliError
from memtui.cli.parser import build_parser, chosen_parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, extras = parser.parse_known_args(argv)
    if getattr(args, "takes_extras", False):
        args.extras = extras
    elif extras:
        chosen_parser(parser, args).unrecognized(extras)
    try:
        return int(args.handler(args))
    except CliError as err:
        print(f"memtui: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `memtui status --json | head`: the reader left, not an error
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # Python's exit flush must not raise again
        return 0
    except Exception as err:  # last: the clauses above are the ones for their errors
        said = store_problem(err)
        if said is None:
            raise
        print(f"memtui: {said}", file=sys.stderr)
        return 2


def store_problem(err: BaseException) -> str | None:
    """One line for a run's store that cannot be used (truncated, zeroed, bytes flipped, a
    newer schema), whichever command met it; None for any other error. The checkpoints are
    files of their own: a damaged store loses none of them."""
    if isinstance(err, sqlite3.DatabaseError):
        checkpoints = "`memtui checkpoints RUN` lists the checkpoints that verify"
        return f"a run's store cannot be read ({err}); {checkpoints}"
    store = sys.modules.get("engine.run.storage.store")  # imported by whoever opened a store
    return str(err) if store is not None and isinstance(err, store.StoreError) else None


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
