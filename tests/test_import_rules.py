"""The import rules of docs/architecture.md, checked on every module there is.

Each side is imported whole, module by module, in a fresh interpreter, and what that loaded
is compared with what the side may load:

- nothing under ``memtui`` loads torch or deepspeed;
- nothing under ``engine`` outside ``engine.trainer`` loads torch, deepspeed or textual;
- nothing under ``engine.trainer`` loads textual (nor rich, its renderer) or memtui.

The modules are found by walking the packages, never listed by hand: a new or renamed
module is checked as soon as it exists, and one the walk misses (say, a directory without an
``__init__.py``) fails the walk's own test. Child-process entry points that need torch
(``engine.doctor.deepspeed_ops``, the doctor's ``_ask_torch``) import it inside functions,
so importing them is clean like any other module; so are the ``__main__`` modules, whose
work is behind ``if __name__ == "__main__"``. No module is left out.
"""

from __future__ import annotations

import importlib.util
import json
import pkgutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Side:
    """The modules under ``package`` (less those under ``outside``) and what they must not load."""

    package: str
    forbidden: frozenset[str]
    outside: str | None = None

    @property
    def name(self) -> str:
        return self.package + (f" outside {self.outside}" if self.outside else "")

    def modules(self) -> list[str]:
        return [m for m in walk(self.package) if not self.excludes(m)]

    def excludes(self, module: str) -> bool:
        return self.outside is not None and (module == self.outside or module.startswith(self.outside + "."))


SIDES = [
    Side("memtui", frozenset({"torch", "deepspeed"})),
    Side("engine", frozenset({"torch", "deepspeed", "textual"}), outside="engine.trainer"),
    Side("engine.trainer", frozenset({"textual", "rich", "memtui"})),  # rich: textual's renderer
]

FEWEST_MODULES = {"memtui": 40, "engine": 60}
"""Far fewer modules than each package has: a walk that finds less has gone wrong."""

IMPORT_ALL = """
import importlib, json, sys
loaded_by = {}  # top-level package -> the module whose import loaded it first
for name in json.loads(sys.argv[1]):
    before = {m.split(".")[0] for m in sys.modules}
    importlib.import_module(name)
    for top in {m.split(".")[0] for m in sys.modules} - before:
        loaded_by[top] = name
print(json.dumps({"modules": sorted(sys.modules), "loaded_by": loaded_by}))
"""


def walk(package: str) -> list[str]:
    """``package`` and every module and package below it, as ``pkgutil.walk_packages`` finds them."""
    root = importlib.import_module(package)
    found = [info.name for info in pkgutil.walk_packages(root.__path__, f"{package}.")]
    return [package, *found]


def on_disk(package: str) -> set[str]:
    """The module name of every ``.py`` file under ``package``'s directory."""
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None, package
    root = Path(spec.origin).parent
    names = set()
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names.add(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def import_in_a_fresh_interpreter(modules: list[str]) -> tuple[set[str], dict[str, str]]:
    """(top-level packages loaded, which module loaded each first) after importing ``modules``."""
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, json.dumps(modules)],
        capture_output=True,
        text=True,
        timeout=240,  # the trainer's side imports torch and deepspeed: seconds, more on a busy machine
    )
    assert done.returncode == 0, f"a module cannot be imported on its own:\n{done.stderr}"
    answer = json.loads(done.stdout.splitlines()[-1])
    return {m.split(".")[0] for m in answer["modules"]}, answer["loaded_by"]


@pytest.mark.parametrize("package", sorted(FEWEST_MODULES))
def test_the_walk_finds_every_module(package: str) -> None:
    walked = walk(package)
    assert len(walked) >= FEWEST_MODULES[package], walked
    assert set(walked) == on_disk(package)  # no file the walk does not reach
    sides = [side for side in SIDES if side.package.split(".")[0] == package]
    covered = [m for side in sides for m in side.modules()]
    assert sorted(covered) == sorted(walked)  # every module on exactly one side


@pytest.mark.slow
@pytest.mark.parametrize("side", SIDES, ids=[side.name for side in SIDES])
def test_each_side_loads_nothing_it_must_not(side: Side) -> None:
    modules = side.modules()
    loaded, loaded_by = import_in_a_fresh_interpreter(modules)
    broken = {top: loaded_by[top] for top in sorted(side.forbidden & loaded)}
    assert not broken, f"{side.name} loads (package: first module to load it) {broken}"
