"""House rules every module keeps, checked by walking the source: each logger is named after
its own module (``__name__``) unless a reason is written beside it, and each package says
what it is in its ``__init__`` docstring."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(p for top in ("engine", "memtui") for p in (ROOT / top).rglob("*.py"))
NAMED_LOGGER = re.compile(r"getLogger\((?!__name__\))[^)]+\)(?P<rest>.*)$")


def test_the_walk_finds_the_sources() -> None:
    assert len(SOURCES) > 100


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_module_logger_is_named_after_its_module_or_says_why(path: Path) -> None:
    for line in path.read_text().splitlines():
        found = NAMED_LOGGER.search(line)
        if found and line.lstrip().startswith("log") and "=" in line:
            assert "#" in found["rest"], f"{path.name}: {line.strip()} (use __name__, or say why)"


PACKAGES = [p for p in SOURCES if p.name == "__init__.py"]


@pytest.mark.parametrize("path", PACKAGES, ids=lambda p: str(p.parent.relative_to(ROOT)))
def test_each_package_says_what_it_is(path: Path) -> None:
    assert ast.get_docstring(ast.parse(path.read_text())), f"{path} has no docstring"


WIDEST_FOLDER = 15
"""Modules one folder may hold (``__init__`` and ``__main__`` aside) before it is split by
concept into sub-packages: a reader finds a module by the folder's idea, not by scrolling."""


def module_folders() -> dict[Path, list[str]]:
    """Each source folder and the modules in it."""
    folders: dict[Path, list[str]] = {}
    for path in SOURCES:
        if path.name not in ("__init__.py", "__main__.py"):
            folders.setdefault(path.parent, []).append(path.stem)
    return folders


def test_the_folders_are_found() -> None:
    assert {ROOT / "engine" / "trainer", ROOT / "engine" / "supervisor"} <= set(module_folders())


@pytest.mark.parametrize("folder", sorted(module_folders()), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_folder_is_wider_than_a_reader_can_scan(folder: Path) -> None:
    modules = module_folders()[folder]
    assert len(modules) <= WIDEST_FOLDER, (
        f"{folder.relative_to(ROOT)}: {len(modules)} modules {sorted(modules)}"
    )
