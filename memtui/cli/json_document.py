"""What ``--json`` prints: exactly one JSON document on stdout, ``[]`` for an empty list.

``print_json`` writes a value held in memory; ``stream_json_array`` writes rows read a page
at a time (``directives --decisions`` may hold tens of thousands of verdicts) as one array:
``[``, one element per line separated by commas, ``]``, each element written as it comes,
so memory stays one page whatever the count. Torch-free.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from typing import Any, TextIO


def print_json(value: Any, out: TextIO | None = None) -> None:
    """``value`` as one indented JSON document and a newline."""
    print(json.dumps(value, indent=2), file=out or sys.stdout)


def stream_json_array(items: Iterable[Any], out: TextIO | None = None) -> int:
    """``items`` as one JSON array, written element by element; returns how many."""
    out = out or sys.stdout
    count = 0
    for item in items:
        out.write(("[\n" if count == 0 else ",\n") + json.dumps(item))
        count += 1
    out.write("[]\n" if count == 0 else "\n]\n")
    return count
