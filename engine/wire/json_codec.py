"""JSON as the wire takes it: any bytes become a value or a ``WireJsonError`` with a reason.

``json.loads`` lets hostile input escape as other exceptions (``RecursionError`` for deep
nesting, ``ValueError`` for an integer of thousands of digits) and accepts what cannot be
sent on (lone UTF-16 surrogates, integers SQLite cannot store). Here a line is parsed by
pydantic-core's parser (UTF-8 only, lone surrogates refused, NaN and Infinity kept: the
loss may be either), then its values are checked: at most ``MAX_DEPTH`` levels of nesting
and integers that fit 64 bits. What is accepted can be validated, stored and encoded again.
Reasons are short and quote at most ``SHOWN_CHARS`` characters of the input. Torch-free.
"""

from __future__ import annotations

import reprlib
from typing import Any

from pydantic_core import from_json

MAX_DEPTH = 64  # levels of arrays and objects a client's message may nest
INT_MIN, INT_MAX = -(2**63), 2**63 - 1  # SQLite's INTEGER: what the store can keep
SHOWN_CHARS = 80  # of a hostile value quoted in a reason

_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = SHOWN_CHARS
_repr.maxlevel = 2


class WireJsonError(ValueError):
    """Not JSON the wire accepts; ``reason`` says why in a line."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def parse(line: bytes | str, max_depth: int = MAX_DEPTH) -> Any:
    """The JSON value of ``line``; raises WireJsonError (never anything else) with a reason."""
    if isinstance(line, str):
        try:
            line = line.encode("utf-8")
        except UnicodeEncodeError as err:
            raise WireJsonError(f"malformed JSON: not UTF-8 text at character {err.start}") from None
    try:
        value = from_json(line, allow_inf_nan=True)
    except ValueError as err:  # pydantic-core's reason says what and where ("at line 1 column 7")
        reason = str(err)
        if reason.startswith("recursion limit exceeded"):  # its own limit, 200 levels
            raise WireJsonError(f"JSON nested deeper than {max_depth} levels") from None
        if reason.startswith("number out of range"):  # over Python's int-max-str-digits
            raise WireJsonError(f"a number does not fit in 64 bits ({shorten(reason)})") from None
        raise WireJsonError(f"malformed JSON: {shorten(reason)}") from None
    check(value, max_depth)
    return value


def check(value: Any, max_depth: int = MAX_DEPTH) -> None:
    """Raise WireJsonError, naming where, if ``value`` nests deeper than ``max_depth`` or
    holds an integer outside 64 bits. Iterative: a hostile depth cannot exhaust the stack."""
    # Each entry: (value, depth, path); a path is (key, parent's path) or None at the top,
    # so a node costs one small tuple however deep it is.
    stack: list[tuple[Any, int, Any]] = [(value, 0, None)]
    while stack:
        item, depth, path = stack.pop()
        if isinstance(item, dict):
            children: Any = item.items()
        elif isinstance(item, list):
            children = enumerate(item)
        else:
            if type(item) is int and not INT_MIN <= item <= INT_MAX:
                where = _where(path)
                raise WireJsonError(
                    f"field {where}: integer of {item.bit_length()} bits does not fit in 64 bits"
                )
            continue
        if depth >= max_depth:
            raise WireJsonError(f"field {_where(path)}: JSON nested deeper than {max_depth} levels")
        stack.extend((child, depth + 1, (key, path)) for key, child in children)


def _where(path: Any) -> str:
    """A path as ``'sample.step'``, cut short."""
    keys: list[str] = []
    while path is not None:
        key, path = path
        keys.append(shorten(str(key)))
    return repr(shorten(".".join(reversed(keys)) or "(message)"))


def shown(value: object) -> str:
    """``repr(value)`` cut to about SHOWN_CHARS characters, for quoting hostile input."""
    return shorten(_repr.repr(value))


def shorten(text: str, limit: int = SHOWN_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."
