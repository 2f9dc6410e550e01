"""``--set KEY=VALUE`` on the command line: one config key, dotted, with a TOML value.

``train.ranks=2`` -> ``{"train": {"ranks": 2}}``; the value is read as TOML (numbers,
booleans, quoted strings, arrays), and a bare word that is not TOML is taken as a string,
so ``--set train.precision=bf16`` needs no quotes. Validation is the config's own: an
unknown key or a bad value is refused naming the key, like in a TOML file.
"""

from __future__ import annotations

import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


class OverrideError(ValueError):
    """The text is not KEY=VALUE with a dotted key."""


def parse_override(text: str) -> dict[str, Any]:
    """``"a.b=3"`` -> ``{"a": {"b": 3}}``."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not _KEY.match(key):
        raise OverrideError(f"--set {text!r}: expected KEY=VALUE with a dotted key, e.g. train.ranks=2")
    nested: dict[str, Any] = {}
    inner = nested
    *parents, leaf = key.split(".")
    for name in parents:
        inner = inner.setdefault(name, {})
    inner[leaf] = _value(value.strip())
    return nested


def _value(text: str) -> Any:
    try:
        return tomllib.loads(f"v = {text}")["v"]
    except tomllib.TOMLDecodeError:
        return text  # a bare word: bf16, rules, manual
