"""``/metrics`` of a live run: the real CLI starts the real supervisor (with the torch-free
fake trainer) with ``metrics.port`` set; a real HTTP client scrapes it, prometheus-client's
own parser reads it, and every figure equals what ``memtui status --json`` says. The run is
paused first, so that the scrape and the status describe the same step."""

from __future__ import annotations

import json
import socket
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_harness import memtui, throwaway_home
from prometheus_client.parser import text_string_to_metric_families

from tests.waiting import CLI_POLL_S, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(300)]

FAKE_TRAINER = Path(__file__).resolve().parent / "fakes" / "fake_trainer.py"
ENV = {
    "MEMTUI_TRAINER_CMD": f"{sys.executable} {FAKE_TRAINER}",
    "FAKE_TRAINER_STEPS": "1000000",
    "FAKE_TRAINER_RATE_HZ": "20",
    "FAKE_TRAINER_EVAL_EVERY": "3",
}
# metric name -> the status --json key holding the same figure
SAME_AS_STATUS = {
    "memtui_step": "step",
    "memtui_target_steps": "target_steps",
    "memtui_last_step_timestamp_seconds": "updated_at",
    "memtui_loss": "loss",
    "memtui_tokens_per_second": "tokens_per_s",
    "memtui_mfu_ratio": "mfu",
    "memtui_step_seconds": "step_time_s",
    "memtui_loss_scale": "loss_scale",
    "memtui_checkpoint_step": "checkpoint_step",
    "memtui_memory_allocated_bytes": "mem_allocated",
    "memtui_memory_reserved_bytes": "mem_reserved",
    "memtui_memory_peak_bytes": "mem_peak",
    "memtui_memory_capacity_bytes": "mem_capacity",
    "memtui_restarts_total": "restarts",
}


COMPARED_APART = {
    "memtui_run_info",
    "memtui_memory_allocated_bytes",
    "memtui_eval_loss",
    "memtui_eval_step",
    "memtui_workload_metric",
    "memtui_eval_metric",
    "memtui_directives_pending",
    "memtui_overflows_total",
}
"""Families compared by hand in the test (labels beyond ``run``, or a nested status key)."""
NO_STATUS_TWIN = {
    "memtui_tokens_total",  # counters for rate(): status --json says tokens/s instead
    "memtui_samples_total",
    "memtui_skipped_steps_total",
    "memtui_alert_firing",  # status says the alerts as events, not as gauges
    "memtui_alerts_by_severity",
    "memtui_checkpoint_last_save_step",  # the newest save attempted; status has the newest verified
    "memtui_checkpoint_last_save_timestamp_seconds",
    "memtui_checkpoint_age_seconds",
}
"""Families with no figure of their own in ``status --json``, each with the reason."""


@pytest.fixture
def home() -> Iterator[Path]:
    yield from throwaway_home("mtpm")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def status(home: Path, run_id: str) -> dict[str, Any]:
    done = memtui(home, "status", run_id, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # type: ignore[no-any-return]


def scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """(sample name, sorted labels) -> value, parsed by prometheus-client's own parser."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float], metric: str, /, **labels: str
) -> float | None:
    """The value of the one sample ``metric`` whose labels include ``labels``; None if none."""
    found = [v for (n, ls), v in samples.items() if n == metric and labels.items() <= dict(ls).items()]
    assert len(found) <= 1, f"{metric} {labels}: {len(found)} samples"
    return found[0] if found else None


def test_a_scrape_of_a_live_run_says_what_status_json_says(home: Path) -> None:
    port = free_port()
    started = memtui(
        home, "run", "--preset", "tiny", "--steps", "1000000", "--set", f"metrics.port={port}",
        "--detach", "--json", env=ENV,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    run_id = json.loads(started.stdout)["run_id"]
    wait_for(lambda: (status(home, run_id).get("last_eval") or {}).get("step"), what="a first eval")
    assert memtui(home, "pause", run_id).returncode == 0
    wait_for(lambda: status(home, run_id)["state"] == "paused", what="the run paused", every_s=CLI_POLL_S)

    figures = status(home, run_id)
    samples = scrape(port)
    assert value(samples, "memtui_run_info", run=run_id, state="paused") == 1.0
    for name, key in SAME_AS_STATUS.items():
        assert value(samples, name, run=run_id) == figures[key], name
    kind = figures["mem_kind"]
    assert value(samples, "memtui_memory_allocated_bytes", run=run_id, kind=kind) == figures["mem_allocated"]
    assert value(samples, "memtui_eval_loss", run=run_id) == figures["last_eval"]["loss"]
    assert value(samples, "memtui_eval_step", run=run_id) == figures["last_eval"]["step"]
    for metric, figure in figures["metrics"].items():
        assert value(samples, "memtui_workload_metric", run=run_id, name=metric) == figure
    for metric, figure in figures["last_eval"]["metrics"].items():
        assert value(samples, "memtui_eval_metric", run=run_id, name=metric) == figure
    assert value(samples, "memtui_directives_pending", run=run_id) == 0.0
    assert value(samples, "memtui_overflows_total", run=run_id) is not None
    # Every family the scrape holds is one of those compared above, or said to have no
    # status twin: a new family fails here until it is compared or named as such.
    compared = {*SAME_AS_STATUS, *COMPARED_APART}
    scraped = {name for name, _ in samples}
    assert scraped - compared - NO_STATUS_TWIN == set(), "compare it with status --json, or name it"
    assert memtui(home, "stop", run_id).returncode == 0
