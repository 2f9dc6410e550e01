"""Sharing a CPU-only host's cores: every core to training, divided between ranks, the
user's OMP_NUM_THREADS kept."""

from __future__ import annotations

import os

from engine.cpu_share import threads_per_rank, usable_cores, user_threads
from engine.supervisor.trainers.trainer_process import trainer_environment


def test_every_core_goes_to_one_rank_and_is_divided_between_several() -> None:
    assert threads_per_rank(2, 1) == 2
    assert threads_per_rank(16, 2) == 8
    assert threads_per_rank(16, 3) == 5
    assert threads_per_rank(2, 4) == 1  # never zero


def test_usable_cores_follow_the_affinity_mask() -> None:
    assert usable_cores() == len(os.sched_getaffinity(0))


def test_the_users_omp_num_threads_wins_and_bad_values_are_ignored() -> None:
    assert user_threads({"OMP_NUM_THREADS": "3"}) == 3
    assert user_threads({}) is None
    assert user_threads({"OMP_NUM_THREADS": "0"}) is None
    assert user_threads({"OMP_NUM_THREADS": "many"}) is None


def test_the_supervisor_gives_each_rank_its_share_unless_the_user_chose() -> None:
    cores = usable_cores()
    env = trainer_environment({"PATH": "/bin"}, ranks=2)
    assert env["OMP_NUM_THREADS"] == str(max(1, cores // 2)) and env["PYTHONUNBUFFERED"] == "1"
    assert "OMP_NUM_THREADS" not in trainer_environment({}, ranks=1)  # torch sizes itself
    assert trainer_environment({"OMP_NUM_THREADS": "5"}, ranks=2)["OMP_NUM_THREADS"] == "5"
