"""``memtui endure``'s pure parts: the seeded kill schedule and the run config it builds."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from engine.chaos.config import default_kinds
from memtui.cli.errors import CliError
from memtui.cli.runs.endurance_commands import endurance_config
from memtui.cli.runs.endurance_driver import kill_steps


def test_kill_steps_are_reproducible_distinct_and_inside_the_run() -> None:
    steps = kill_steps(seed=4, steps=100_000, kills=5)
    assert steps == kill_steps(seed=4, steps=100_000, kills=5) != kill_steps(seed=5, steps=100_000, kills=5)
    assert steps == sorted(set(steps)) and len(steps) == 5
    assert all(10_000 <= s <= 90_000 for s in steps)
    assert kill_steps(seed=0, steps=3, kills=9) == [1, 2]  # a tiny run: as many as fit
    assert kill_steps(seed=0, steps=1000, kills=0) == []


def _args(tmp_path: Path, config: str | None = None, **extra: object) -> argparse.Namespace:
    path = None
    if config is not None:
        path = tmp_path / "c.toml"
        path.write_text(config)
    values = {"config": path, "settings": [], "steps": 500, "seed": 7, "chaos_every": 50, "name": "endure"}
    return argparse.Namespace(**{**values, **extra})


def test_config_attacks_with_every_kind_unless_the_file_names_its_own(tmp_path: Path) -> None:
    config = endurance_config(_args(tmp_path))
    assert set(config.chaos.kinds) == set(default_kinds()) and set(config.chaos.kinds.values()) == {1}
    assert (config.chaos.every_steps, config.chaos.seed, config.steps) == (50, 7, 500)
    assert config.restart.on_preemption is True
    own = endurance_config(_args(tmp_path, "[chaos]\nkinds = { kill = 2 }\n"))
    assert own.chaos.kinds == {"kill": 2}


def test_a_bad_setting_is_a_config_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CliError, match="every_steps"):
        endurance_config(_args(tmp_path, "[chaos]\nevery_steps = -3\n", chaos_every=None))
