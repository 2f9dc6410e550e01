"""The user's documentation as the tests read it: README.md and the guide's pages under
``docs/``, their fenced examples, their headings' anchors and their links.

An example that no test can run (it needs a GPU, several hosts, or it is a synopsis rather
than a command) says so on the line just above its fence, with the reason:
``<!-- not-run: REASON -->``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDE = ROOT / "docs"

NOT_RUN = re.compile(r"^<!-- not-run: (.+?) -->$")
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.I)


@dataclass(frozen=True)
class Example:
    """One fenced block of a page."""

    page: Path
    line: int  # 1-based line of the opening fence
    lang: str  # the fence's info string, "" when there is none
    text: str
    before: str  # the last non-blank line above the fence (and above its marker)
    not_run: str | None  # the reason a `<!-- not-run: ... -->` marker gives

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def pages() -> list[Path]:
    """README.md and every page of the guide."""
    return [README, *sorted(GUIDE.glob("*.md"))]


def examples(page: Path) -> list[Example]:
    """Every fenced block of ``page``, in order."""
    lines = page.read_text(encoding="utf-8").split("\n")
    found: list[Example] = []
    start: int | None = None
    for number, line in enumerate(lines):
        if not line.startswith("```"):
            continue
        if start is None:
            start = number
            continue
        found.append(_example(page, lines, start, number))
        start = None
    assert start is None, f"{page.name}:{start}: a fence is never closed"
    return found


def _example(page: Path, lines: list[str], start: int, end: int) -> Example:
    above = [line for line in lines[:start] if line.strip()]
    marker = NOT_RUN.match(above[-1]) if above else None
    if marker:
        above.pop()
    return Example(
        page=page,
        line=start + 1,
        lang=lines[start][3:].strip(),
        text="\n".join(lines[start + 1 : end]) + "\n",
        before=above[-1] if above else "",
        not_run=marker.group(1) if marker else None,
    )


def prose(page: Path) -> list[tuple[int, str]]:
    """The page's lines outside fenced blocks, with their 1-based numbers."""
    kept: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(page.read_text(encoding="utf-8").split("\n"), 1):
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced:
            kept.append((number, line))
    return kept


def anchors(page: Path) -> set[str]:
    """The anchors GitHub gives the page's headings (a repeated one gets -1, -2, ...)."""
    seen: dict[str, int] = {}
    for _, line in prose(page):
        heading = re.match(r"^#{1,6} (.+)$", line)
        if heading:
            base = slug(heading.group(1))
            count = seen.get(base, 0)
            seen[base] = count + 1
            if count:
                seen[f"{base}-{count}"] = 1
    return set(seen)


def slug(heading: str) -> str:
    """A heading's anchor as GitHub writes it: lower case, punctuation dropped, spaces as -."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def relative_links(page: Path) -> list[tuple[int, str]]:
    """Each link to a file or an anchor of this repository (no scheme), with its line."""
    found: list[tuple[int, str]] = []
    for number, line in prose(page):
        unquoted = re.sub(r"`[^`]*`", "", line)
        found += [(number, target) for target in LINK.findall(unquoted) if not SCHEME.match(target)]
    return found
