"""``memtui``'s argument parser: the root flags and every command, in the order ``--help``
lists them.

Each command group module registers its own subcommands (flags next to the code that reads
them) and names its handler in ``handler``; ``main`` calls it. Building the parser imports
only the command modules themselves, whose heavy imports wait until a command runs, so
``memtui --help`` stays instant.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable
from typing import Any, NoReturn

from memtui.cli import chaos_command
from memtui.cli.arguments import add_bell, add_readonly, add_theme
from memtui.cli.directives import directive_commands
from memtui.cli.doctor import doctor_command
from memtui.cli.inspection import inspection_commands, oom_command
from memtui.cli.plan import plan_command
from memtui.cli.runs import endurance_commands, lifecycle_commands, pause_commands
from memtui.cli.serve import serve_command

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
    """Argument errors as one line and exit status 2, naming this (sub)command's ``--help``.
    No abbreviations: argparse would take ``memtui run --step 100`` as ``--steps 100``, and a
    flag added later could change what an old command line means."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _check_value(self, action: argparse.Action, value: Any) -> None:
        """A value outside ``choices`` (a preset, a format, a subcommand) names the nearest one."""
        choices = action.choices
        if choices is None or value in choices:
            return
        names = {str(c).lower(): str(c) for c in choices}
        near = difflib.get_close_matches(str(value).lower(), list(names), n=1, cutoff=0.6)
        hint = f"; did you mean {names[near[0]]}?" if near else ""
        shown = repr(value) if len(str(value)) <= 40 else repr(str(value)[:37]) + "..."
        listed = ", ".join(map(repr, names.values()))
        raise argparse.ArgumentError(action, f"invalid choice: {shown} (choose from {listed}){hint}")

    def unrecognized(self, extras: list[str]) -> NoReturn:
        """Refuse arguments this command does not take, suggesting the nearest flag of its own."""
        flags = [flag for action in self._actions for flag in action.option_strings]
        unknown = next((e.split("=", 1)[0] for e in extras if e.startswith("-")), None)
        near = difflib.get_close_matches(unknown, flags, n=1) if unknown else []
        hint = f"; did you mean {near[0]}?" if near else ""
        self.error(f"unrecognized arguments: {' '.join(extras)}{hint}")


def chosen_parser(parser: argparse.ArgumentParser, args: argparse.Namespace) -> ArgumentParser:
    """The parser of the subcommand ``args`` came from (the root parser when there was none)."""
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    chosen = subparsers.choices.get(getattr(args, "command", None) or "", parser)
    assert isinstance(chosen, ArgumentParser)
    return chosen


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
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", dest="command")
    for add_subcommand in SUBCOMMANDS:
        add_subcommand(sub)
    return parser
