"""``memtui status`` says how much of the step the trainer waited for data, once a trainer
measured it, and nothing before."""

from __future__ import annotations

from engine.domain import RunStatus
from memtui.status_report import data_wait_text, status_rows


def status(**over: float) -> RunStatus:
    return RunStatus.model_validate({"run_id": "r", "name": "n", "state": "running", "run_dir": "/r", **over})


def test_the_data_wait_is_a_share_of_the_step_on_the_throughput_row() -> None:
    waited = status(tokens_per_s=1000.0, step_time_s=0.2, data_wait_s=0.05)
    assert data_wait_text(waited) == ", waits for data 25.0% of the step"
    assert dict(status_rows(waited, 0.0))["throughput"].endswith("waits for data 25.0% of the step")
    assert data_wait_text(status(step_time_s=0.2)) == ""  # an older trainer: not measured
    assert data_wait_text(status(step_time_s=0.0, data_wait_s=0.0)) == ""
