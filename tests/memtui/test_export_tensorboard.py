"""``memtui export --format tensorboard``, read back with TensorBoard's own event reader."""

from __future__ import annotations

import builtins
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from engine.run.storage.store import Store
from memtui.cli.inspection.tensorboard_export import EXTRA, STEP_TAGS, WORKLOAD_PREFIX
from memtui.cli.main import main
from tests.memtui.stored_runs import EVENTS, stored_run

event_accumulator = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator")


def _read_back(logdir: Path) -> Any:
    every = {event_accumulator.SCALARS: 0, event_accumulator.TENSORS: 0}
    acc = event_accumulator.EventAccumulator(str(logdir), size_guidance=every)
    acc.Reload()
    return acc


def test_scalars_read_back_equal_the_store(home: Path, tmp_path: Path) -> None:
    shown = stored_run(home)
    out = tmp_path / "tb"
    assert main(["export", shown.run.run_id, "--format", "tensorboard", "--out", str(out)]) == 0
    board = _read_back(out)
    with Store(shown.run.store, readonly=True) as store:
        samples = list(store.iter_steps())
    fields = {**STEP_TAGS, WORKLOAD_PREFIX + "acc": "acc"}
    for tag, field in fields.items():
        expected = [
            (s.step, s.ts, np.float32(value))
            for s in samples
            if (value := (s.metrics or {}).get(field) if field == "acc" else getattr(s, field)) is not None
        ]
        read = [(p.step, p.wall_time, np.float32(p.value)) for p in board.Scalars(tag)] if expected else []
        assert read == expected, tag  # TensorBoard keeps scalars as float32
    assert [(p.step, p.value) for p in board.Scalars("eval/loss")] == [(35, 3.0)]
    again = main(["export", shown.run.run_id, "--format", "tensorboard", "--out", str(out)])
    assert again == 2 and len(list(out.iterdir())) == 1  # a second export would double every curve
    assert [(p.step, np.float32(p.value)) for p in board.Scalars("eval/workload/acc")] == [
        (35, np.float32(0.4))
    ]


def test_every_event_is_text_at_its_time(home: Path, tmp_path: Path) -> None:
    shown = stored_run(home)
    out = tmp_path / "tb"
    assert main(["export", shown.run.run_id, "--format", "tensorboard", "--out", str(out)]) == 0
    texts = _read_back(out).Tensors("events")
    messages = [t.tensor_proto.string_val[0].decode() for t in texts]
    assert len(messages) == len(EVENTS)
    for text, (_, payload, message, _) in zip(messages, EVENTS, strict=True):
        assert f"**{payload.event_type}**" in text and message in text
    restarted = next(t for t, m in zip(texts, messages, strict=True) if "trainer_restarted" in m)
    assert restarted.step == 40  # the newest step stored before it


def test_a_missing_tensorboard_names_the_extra(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    shown = stored_run(home)
    real_import = builtins.__import__

    def no_tensorboard(name: str, *args: Any, **kwargs: Any) -> Any:
        if name.startswith("tensorboard"):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    out = tmp_path / "tb"
    assert main(["export", shown.run.run_id, "--format", "tensorboard", "--out", str(out)]) == 2
    assert EXTRA in capsys.readouterr().err and not out.exists()
    assert main(["export", shown.run.run_id, "--format", "tensorboard"]) == 2  # no --out
