"""``memtui``'s argument parser: the root flags and every command, in the order ``--help``
lists them.

Each command group module registers its own subcommands (flags next to the code that reads
them) and names its handler in ``handler``; ``main`` calls it. Building the parser imports
only the command modules themselves, whose heavy imports wait until a command runs, so
``memtui --help`` stays instant.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from memtui.cli import (
    chaos_command,
    directive_commands,
    doctor_command,
    endurance_commands,
    inspection_commands,
    lifecycle_commands,
    oom_command,
    pause_commands,
    plan_command,
    serve_command,
)
from memtui.cli.arguments import add_bell, add_readonly, add_theme

SUBCOMMANDS: tuple[Callable[[Any], None], ...] = (
    lifecycle_commands.add_run_parser,
    lifecycle_commands.add_attach_parser,
    inspection_commands.add_export_parser,
    inspection_commands.add_ls_parser,
    inspection_commands.add_status_parser,
    inspection_commands.add_logs_parser,
    lifecycle_commands.add_stop_parser,
    lifecycle_commands.add_resume_parser,
    inspection_commands.add_checkpoints_parser,
    oom_command.add_parser,
    endurance_commands.add_report_parser,
    endurance_commands.add_endure_parser,
    doctor_command.add_parsers,
    directive_commands.add_parsers,
    pause_commands.add_parsers,
    chaos_command.add_parser,
    plan_command.add_parser,
    serve_command.add_parser,
)
"""What registers each subcommand, in the order ``memtui --help`` lists them."""


class ArgumentParser(argparse.ArgumentParser):
    """Argument errors as one line and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    """The whole command line; each parsed command carries its ``handler(args) -> exit code``
    (and ``takes_extras`` when it reads argparse's leftovers itself, as ``chaos`` does)."""
    from memtui import __version__

    parser = ArgumentParser(
        prog="memtui",
        description="An operator console for long PyTorch/DeepSpeed training runs.",
        epilog="With no command: attach to the newest live run, or start the tiny demo run and attach.",
    )
    parser.add_argument("--version", action="version", version=f"memtui {__version__}")
    add_theme(parser, root=True)
    add_readonly(parser, root=True)
    add_bell(parser, root=True)
    parser.set_defaults(handler=lifecycle_commands.cmd_default)
    sub = parser.add_subparsers(title="commands", metavar="COMMAND")
    for add_subcommand in SUBCOMMANDS:
        add_subcommand(sub)
    return parser
