"""The hardware panel's rank rows: torchrun's children found by their RANK."""

from __future__ import annotations

import subprocess

import pytest

from engine.supervisor.trainers.rank_processes import rank_processes
from tests.waiting import wait_for

pytestmark = pytest.mark.slow  # starts real processes (tests/conftest.py)


def test_children_with_a_rank_are_listed_in_rank_order() -> None:
    launcher = subprocess.Popen(
        ["sh", "-c", "RANK=1 sleep 30 & RANK=0 sleep 30 & sleep 30 & wait"],  # and one without
        start_new_session=True,
    )
    try:
        found = wait_for(
            lambda: len(ranks := rank_processes(launcher.pid)) >= 2 and ranks,
            timeout=30,
            what="both ranked children",
            seen=lambda: rank_processes(launcher.pid),
        )
        assert list(found) == ["rank 0", "rank 1"]
        assert len(set(found.values())) == 2 and launcher.pid not in found.values()
    finally:
        subprocess.run(["pkill", "-KILL", "-g", str(launcher.pid)], check=False)
        launcher.wait()
    assert rank_processes(launcher.pid) == {}  # gone: nothing, no error
