"""The import contract (``[tool.importlinter]`` in pyproject.toml) holds, and catches a
forbidden import planted in a copy of the packages: one per kind of rule."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
LINT_IMPORTS = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"

pytestmark = pytest.mark.timeout(300)


def lint_imports(root: Path) -> subprocess.CompletedProcess[str]:
    """``lint-imports`` over the packages under ``root`` (first on the path), no cache."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [LINT_IMPORTS, "--no-cache"], cwd=root, env=env, capture_output=True, text=True, timeout=240
    )


@pytest.mark.slow
def test_the_contract_holds() -> None:
    done = lint_imports(ROOT)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "BROKEN" not in done.stdout and "KEPT" in done.stdout


PLANTS = {
    # a rule of each kind: the console and torch, a layer upside down, the trainer reaching
    # the supervisor, the contract importing a package, the data layer importing the console,
    # a cycle between two siblings
    "memtui/console/chart.py": ("import torch", "memtui never imports torch"),
    "engine/run/storage/store.py": ("import engine.alerts.rules", "engine layers"),
    "engine/trainer/memory/geometry.py": ("import engine.supervisor.journal", "the trainer imports only"),
    "engine/domain.py": ("import engine.run.directory", "the contract (engine's top level)"),
    "memtui/history.py": ("import memtui.console.run_view", "memtui's data layer"),
    "engine/checkpoints/manifest.py": ("import engine.checkpoints.catalog", "no import cycles"),
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> subprocess.CompletedProcess[str]:
    """A copy of the repository's packages with every forbidden import of ``PLANTS`` added."""
    copy = tmp_path_factory.mktemp("planted")
    for name in ("engine", "memtui"):
        shutil.copytree(ROOT / name, copy / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
    for module, (line, _) in PLANTS.items():
        path = copy / module
        path.write_text(path.read_text() + f"\n{line}  # planted by the test\n")
    return lint_imports(copy)


@pytest.mark.parametrize("module", sorted(PLANTS))
def test_a_planted_forbidden_import_breaks_its_contract(
    planted: subprocess.CompletedProcess[str], module: str
) -> None:
    line, contract = PLANTS[module]
    assert planted.returncode != 0
    broken = [row for row in planted.stdout.splitlines() if row.endswith("BROKEN")]
    assert any(row.startswith(contract) for row in broken), (contract, broken)
    name = module.removesuffix(".py").rsplit("/", 1)[-1]
    assert name in planted.stdout  # the report names the module (a cycle: relative to its package)
