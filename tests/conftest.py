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
import sys
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO_ROOT = str(Path(__file__).resolve().parents[1])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (REPO_ROOT, os.environ.get("PYTHONPATH")) if p)
