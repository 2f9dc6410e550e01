"""``[eval]``: on by default at a small cost, off with 0, bad values refused naming the key."""

from __future__ import annotations

import pytest

from engine.config.config_file import ConfigError, build_run_config


def test_evals_are_on_by_default_and_zero_turns_them_off() -> None:
    default = build_run_config().eval
    assert default.every_steps > 0 and default.batches > 0
    assert build_run_config({"eval": {"every_steps": 0}}).eval.every_steps == 0


@pytest.mark.parametrize(
    ("raw", "key"),
    [({"every_steps": -1}, "eval.every_steps"), ({"batches": 0}, "eval.batches"), ({"each": 5}, "eval.each")],
)
def test_a_bad_eval_value_names_its_key(raw: dict, key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_run_config({"eval": raw})
