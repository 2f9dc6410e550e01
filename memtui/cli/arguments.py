"""Argument types and the flags several ``memtui`` commands share.

The types turn text into checked values, or an ``argparse.ArgumentTypeError`` that the parser
prints as one line with exit status 2. The shared flags come in two forms: on the root parser
(``root=True``) they carry the default; on a subcommand they leave the attribute alone when
not given (``argparse.SUPPRESS``), so ``memtui --theme X attach`` and ``memtui attach --theme X``
mean the same.
Imports stay lazy: building the parser must not pay for pydantic or the engine.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

MAX_COUNT = 10**12
"""The largest count any flag takes (steps, lines, tokens): beyond it a number is a typo or
an attack, and would only overflow what it reaches."""
MAX_SEQ_LEN = 10**7  # tokens per sample: past any model's context window


def int_at_least(minimum: int, maximum: int = MAX_COUNT) -> Callable[[str], int]:
    """An argument type: an integer from ``minimum`` to ``maximum``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not an integer: {text[:40]!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be at most {maximum:g}, got {text[:40]}")
        return value

    return parse


positive_int = int_at_least(1)
non_negative_int = int_at_least(0)
sequence_length = int_at_least(1, MAX_SEQ_LEN)


def endpoint(text: str) -> str:
    """An argument type: a rendezvous endpoint ``HOST:PORT`` (``run_config.endpoint_problem``)."""
    from engine.config.run_config import endpoint_problem

    problem = endpoint_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < math.inf:  # NaN fails both, and an infinite size or rate divides to 0
        raise argparse.ArgumentTypeError(f"must be a finite positive number, got {text}")
    return value


def theme_name(text: str) -> str:
    """A theme offered by ``memtui.theming`` (built in, or a valid file of the user's)."""
    from memtui.theming import ThemeError, load_theme_spec

    try:
        load_theme_spec(text)
    except ThemeError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    return text


def add_theme(parser: argparse.ArgumentParser, *, root: bool = False) -> None:
    parser.add_argument(
        "--theme",
        type=theme_name,
        default=None if root else argparse.SUPPRESS,
        metavar="NAME",
        help="console theme: dark (default), light or ansi (the terminal's colours), "
        "or one of yours in $MEMTUI_HOME/themes/",
    )


def add_readonly(parser: argparse.ArgumentParser, *, root: bool = False) -> None:
    parser.add_argument(
        "--readonly",
        action="store_true",
        default=False if root else argparse.SUPPRESS,
        help="watch only: the console hides and refuses every command that changes the run",
    )


def add_bell(parser: argparse.ArgumentParser, *, root: bool = False) -> None:
    parser.add_argument(
        "--bell",
        action="store_true",
        default=False if root else argparse.SUPPRESS,
        help="ring the terminal bell on warning and critical alerts (or set MEMTUI_BELL=1)",
    )


def add_run(parser: argparse.ArgumentParser, default: str) -> None:
    """The optional ``RUN`` positional; ``default`` says which run it means when left out."""
    parser.add_argument(
        "run",
        nargs="?",
        metavar="RUN",
        help=f"run id, unique prefix of one, or run directory (default: {default})",
    )
