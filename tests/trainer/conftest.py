"""Trainer tests: the run directories ``make_run`` creates are removed after each test
(each holds real checkpoints, a few MB apiece)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from trainer_harness import MADE_HOMES


@pytest.fixture(autouse=True)
def remove_made_runs() -> Iterator[None]:
    yield
    while MADE_HOMES:
        shutil.rmtree(MADE_HOMES.pop(), ignore_errors=True)
