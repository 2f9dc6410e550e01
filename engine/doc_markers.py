"""A generated part of a docs page: the text between a pair of HTML comment markers, made by
a module from the code it documents (the config keys, the chaos kinds) and kept equal to
the page by a test. ``python -m MODULE`` prints it; ``--write PAGE`` replaces it in place.
Torch-free.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Markers:
    """``<!-- name -->`` ... ``<!-- /name -->`` on one page."""

    name: str

    @property
    def begin(self) -> str:
        return f"<!-- {self.name} -->"

    @property
    def end(self) -> str:
        return f"<!-- /{self.name} -->"

    def written(self, page: Path) -> str:
        """What ``page`` holds between the markers, the markers included; "" without them."""
        text = page.read_text(encoding="utf-8")
        start, end = text.find(self.begin), text.find(self.end)
        return text[start : end + len(self.end)] + "\n" if 0 <= start < end else ""

    def write(self, page: Path, fresh: str) -> None:
        """Replace what ``page`` holds between the markers with ``fresh`` (markers included);
        ValueError when the page has no markers."""
        old = self.written(page)
        if not old:
            raise ValueError(f"{page}: no {self.begin} ... {self.end} markers")
        text = page.read_text(encoding="utf-8")
        page.write_text(text.replace(old.rstrip("\n"), fresh.rstrip("\n")), encoding="utf-8")


def table_cell(text: str) -> str:
    """``text`` as one cell of a Markdown table: its unescaped ``|`` escaped."""
    return re.sub(r"(?<!\\)\|", r"\\|", text)


def generated_section_main(
    markers: Markers, render: Callable[[], str], prog: str, description: str | None, argv: list[str] | None
) -> int:
    """The command line of a module that makes a generated section: print it, or ``--write PAGE``."""
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--write", type=Path, metavar="PAGE", help="replace PAGE's generated part in place")
    args = parser.parse_args(argv)
    if args.write is None:
        print(render(), end="")
        return 0
    try:
        markers.write(args.write, render())
    except ValueError as err:
        parser.error(str(err))
    return 0
