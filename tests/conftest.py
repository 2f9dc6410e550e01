"""Every test can import the shared test code as ``tests.*`` (``tests.waiting``,
``tests.fakes``): the repository root goes on ``sys.path`` before any test module is imported."""

from __future__ import annotations

import sys
from pathlib import Path

REPO_ROOT = str(Path(__file__).resolve().parents[1])
if REPO_ROOT not in sys.path:
    sys.path.insert(0, REPO_ROOT)
