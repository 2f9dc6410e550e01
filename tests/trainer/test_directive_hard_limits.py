"""The trainer's own check of a directive (defence in depth): the policy's bounds, and
beyond them each field's run default alone, so an operator's way back is not refused; and
a resume leaves the one-shot loss-scale power and micro-batch to the scaler state and the
geometry the checkpoint restored."""

from __future__ import annotations

from collections import deque
from types import SimpleNamespace

from engine.config.config_file import build_run_config
from engine.trainer.directive_applier import DirectiveApplier


def applier() -> DirectiveApplier:
    config = build_run_config({"train": {"precision": "fp16", "initial_scale_power": 12}})
    return DirectiveApplier(config, engine=None, memory=None, link=SimpleNamespace(directives=deque()))


def test_the_run_default_passes_beyond_the_policy_bound_and_nothing_else_does() -> None:
    check = applier()
    assert check._refusal("lr_multiplier", 1.0) is None  # the run's default: the way back
    refused = check._refusal("lr_multiplier", 0.9)
    assert refused is not None and "hard limits [0.05, 0.85] and not the run's default" in refused
    assert check._refusal("loss_scale_initial_power", 12) is None  # its default, over the max 10


def test_a_resume_never_sets_the_one_shot_power_or_micro_batch_again() -> None:
    resumed = applier()
    resumed.restore({"loss_scale_initial_power": 9, "micro_batch_size": 8})  # no engine is touched
    assert resumed.effective == {}
