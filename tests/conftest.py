"""Every test can import the shared test code as ``tests.*`` (``tests.waiting``,
``tests.fakes``): the repository root goes on ``sys.path`` before any test module is imported,
and first on ``PYTHONPATH``, so that the processes tests start (supervisors, trainers, the fake
trainer) import this checkout's ``engine`` too, not an installed one.

Trainers started by tests train on one thread (``OMP_NUM_THREADS=1``, unless the caller set
it): the tests check behaviour, not speed, and a trainer whose OpenMP threads share two
cores with pytest, a supervisor and a console waits at every barrier for the thread that
lost its core (several times slower on a 2-core machine), which turns waits into timeouts on
a loaded one. ``bench/`` measures training on every core; ``tests/engine/test_cpu_share.py``
tests how the cores are shared."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = str(Path(__file__).resolve().parents[1])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)


# ---------------------------------------------------------------- the fast lane and the slow one
#
# ``pytest -m "not slow"`` is the edit-test loop (docs/development.md): pure logic, the store,
# the protocol, the console under Pilot. ``slow`` is every test that starts torch or DeepSpeed
# or a real process (a supervisor, a trainer, the fake trainer, the CLI): the ``deepspeed`` and
# ``e2e`` marks imply it, and a module that starts processes some other way says
# ``pytestmark = pytest.mark.slow``. The marker is kept honest by construction: a test outside
# the slow lane that starts a process fails at teardown, naming the command it started.

IMPLIES_SLOW = ("deepspeed", "e2e")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if any(item.get_closest_marker(name) for name in IMPLIES_SLOW):
            item.add_marker(pytest.mark.slow)


_started: list[str] = []
"""argv[0..1] of every process this pytest process started, in order (see _record_starts)."""


def _record_starts() -> None:
    """Count process starts in this interpreter: ``subprocess.Popen`` is the one door for
    ``subprocess.run``, ``check_output`` and asyncio's ``create_subprocess_exec``."""
    execute_child = subprocess.Popen._execute_child  # type: ignore[attr-defined]

    def recording(self: subprocess.Popen, args: Any, *rest: Any, **kwargs: Any) -> Any:
        _started.append(" ".join(map(str, args[:2])) if isinstance(args, list | tuple) else str(args))
        return execute_child(self, args, *rest, **kwargs)

    subprocess.Popen._execute_child = recording  # type: ignore[attr-defined]


_record_starts()


@pytest.fixture(autouse=True)
def _fast_lane_starts_no_process(request: pytest.FixtureRequest) -> Iterator[None]:
    before = len(_started)
    yield
    started = _started[before:]
    if started and request.node.get_closest_marker("slow") is None:
        pytest.fail(
            f"started {len(started)} process(es) ({started[0]!r} first) but is not marked slow: "
            'mark it (pytestmark = pytest.mark.slow) so that `pytest -m "not slow"` stays fast',
            pytrace=False,
        )


# ---------------------------------------------------------------- the tree after the suite
#
# A test writes under its own tmp_path or $MEMTUI_HOME, never into the checkout: a file the
# suite leaves in the repository (a stray store, a screenshot, a report) fails the session,
# named. Compared with the tree as the session found it, so a contributor's own work in
# progress is not the suite's fault. Checked once, by the process that runs the session
# (xdist's controller, not its workers).


def _tree_changes() -> set[str] | None:
    """``git status --porcelain`` lines of the checkout (untracked files one by one, ignored
    ones left out); None outside a git checkout."""
    try:
        done = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=all"],
            cwd=REPO_ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return set(done.stdout.splitlines()) if done.returncode == 0 else None


def pytest_sessionstart(session: pytest.Session) -> None:
    if not hasattr(session.config, "workerinput"):
        session.config.stash[_TREE_BEFORE] = _tree_changes()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    before = session.config.stash.get(_TREE_BEFORE, None)
    if hasattr(session.config, "workerinput") or before is None:
        return
    left = sorted((_tree_changes() or set()) - before)
    if left:
        sys.stderr.write("\nthe suite left these in the checkout (a test must write under tmp_path):\n")
        sys.stderr.write("".join(f"  {line}\n" for line in left))
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


_TREE_BEFORE = pytest.StashKey[set[str] | None]()
