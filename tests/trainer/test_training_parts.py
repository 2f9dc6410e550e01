"""The parts of ``Training`` that need the others are built once, by ``equip``, for the
trainer and every bench alike: the loop reads them as they are, never asking for None."""

from __future__ import annotations

import ast
import dataclasses
import inspect
import types
import typing
from pathlib import Path

from engine.trainer import loop, training_parts
from engine.trainer.training import Training

ROOT = Path(__file__).resolve().parents[2]
PARTS = {f.name for f in dataclasses.fields(Training) if not f.init}


def assigned_by_equip() -> set[str]:
    tree = ast.parse(inspect.getsource(training_parts.equip))
    return {
        target.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign)
        for target in node.targets
        if isinstance(target, ast.Attribute) and getattr(target.value, "id", None) == "training"
    }


def test_equip_builds_every_dependent_part_and_none_is_optional() -> None:
    assert {"memory", "directives", "chaos", "metrics", "evaluator", "cadence"} == PARTS
    assert assigned_by_equip() == PARTS
    hints = typing.get_type_hints(Training)
    for name in PARTS:
        assert type(None) not in typing.get_args(hints[name]), name
        assert not isinstance(hints[name], types.UnionType), name


def test_the_loop_reads_the_parts_without_building_or_checking_them() -> None:
    source = inspect.getsource(loop)
    for name in PARTS:
        assert f"training.{name} or " not in source and f"training.{name} is None" not in source
        assert f"if training.{name} else" not in source
    assert len(source.splitlines()) < 400


def test_every_bench_that_builds_a_training_equips_it() -> None:
    for path in sorted((ROOT / "bench").glob("*.py")):
        text = path.read_text()
        if "loop.Training(" in text:
            assert "equip(" in text, path.name
