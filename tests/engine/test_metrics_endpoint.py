"""The supervisor's ``/metrics`` (``[metrics] port``) against the real supervisor in process
and the torch-free fake trainer: alerts by rule and severity, pending directives and the
newest checkpoint as scraped; a port in use; the config's checks; and no
``prometheus_client`` in a supervisor whose run sets no port."""

from __future__ import annotations

import asyncio
import re
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from engine.alerts.rules import Alert
from engine.config.config_file import ConfigError, build_run_config
from engine.domain import RankMemory, RunStatus, TelemetrySample
from engine.events import METRICS_PORT_RULE, AlertRaised, CheckpointSaved
from engine.measures.eval_summary import EvalSummary
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.metrics.metrics_endpoint import RunCollector
from engine.supervisor.metrics.scrape_figures import LastSave, ScrapeFigures

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def scrape(port: int) -> Samples:
    """A real HTTP GET off the event loop (the collector needs the loop to answer)."""

    def get() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30) as answer:
            return str(answer.read().decode())

    text = await asyncio.to_thread(get)
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def series(samples: Samples, metric: str) -> dict[frozenset[tuple[str, str]], float]:
    return {labels: v for (name, labels), v in samples.items() if name == metric}


@pytest.mark.slow
async def test_alerts_directives_and_the_newest_checkpoint_are_scraped(
    run: RunDir, start: Any, fake_env: Any, wait_until: Any
) -> None:
    port = free_port()
    # the pending directive must not go stale (500 steps: 5 s of the fake trainer) before the scrape
    never_stale = {"max_staleness_steps": 10**9}
    run.write_config(build_run_config({"metrics": {"port": port}, "policy": never_stale}, steps=100000))
    running = await start()
    supervisor = running.supervisor
    await wait_until(lambda: supervisor.latest is not None, "a first step")
    supervisor.alerts.raise_all([Alert("memory_headroom", "warning", "little room left")])
    supervisor.directives.propose_raw({"lr_multiplier": 0.5}, source="operator")  # manual: pending
    supervisor.journal.record(
        CheckpointSaved(
            step=7, tag="global_step7", seconds=0.1, write_s=0.1, seal_s=0.1, background=False, size_bytes=1
        )
    )
    samples = await scrape(port)
    run_id = run.run_id
    assert series(samples, "memtui_alert_firing") == {
        frozenset({("run", run_id), ("rule", "memory_headroom"), ("severity", "warning")}): 1.0
    }
    by_severity = series(samples, "memtui_alerts_by_severity")
    assert by_severity[frozenset({("run", run_id), ("severity", "warning")})] == 1.0
    assert by_severity[frozenset({("run", run_id), ("severity", "critical")})] == 0.0
    assert series(samples, "memtui_directives_pending") == {frozenset({("run", run_id)}): 1.0}
    assert series(samples, "memtui_checkpoint_last_save_step") == {frozenset({("run", run_id)}): 7.0}
    assert list(series(samples, "memtui_checkpoint_age_seconds").values())[0] >= 0.0

    supervisor.alerts.raise_all([Alert("memory_headroom", "info", "back to normal", resolved=True)])
    assert series(await scrape(port), "memtui_alert_firing") == {}


@pytest.mark.slow
async def test_a_port_in_use_is_an_alert_naming_metrics_port_and_the_run_goes_on(
    run: RunDir, start: Any, fake_env: Any, wait_until: Any
) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        run.write_config(build_run_config({"metrics": {"port": port}}, steps=100000))
        running = await start()
        store: Store = running.supervisor.store

        def refused() -> list[str]:
            events = [e for e in store.events_since(0) if e.type == AlertRaised.event_type]
            return [e.message for e in events if e.data.get("rule") == METRICS_PORT_RULE]

        def step() -> int:
            latest = running.supervisor.latest
            return latest.step if latest is not None else 0

        [message] = await wait_until(refused, "the metrics port alert")
        assert "metrics.port" in message and str(port) in message
        before = step()
        await wait_until(lambda: step() > before, "steps after the alert")
        assert running.supervisor.state == "running"


@pytest.mark.parametrize(
    ("section", "key"), [({"port": 70000}, "metrics.port"), ({"address": "localhost:9"}, "metrics.address")]
)
def test_a_bad_metrics_value_names_its_key(section: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        build_run_config({"metrics": section})


@pytest.mark.slow
def test_metrics_are_off_by_default_and_the_supervisor_does_not_import_the_client() -> None:
    assert build_run_config().metrics.port is None
    check = "import sys, engine.supervisor.daemon; assert 'prometheus_client' not in sys.modules"
    done = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_every_ranks_memory_is_labelled_by_rank() -> None:

    ranks = [
        RankMemory(rank=r, allocated=100 + r, reserved=200 + r, peak=300 + r, capacity=1000) for r in (0, 1)
    ]
    status = RunStatus(run_id="r1", name="r", state="running", run_dir="/x", mem_kind="cuda", ranks=ranks)
    figures = ScrapeFigures(status, None, {}, 0, None, now=0.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(lambda: figures))
    text = generate_latest(registry).decode()
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    allocated = series(samples, "memtui_rank_memory_allocated_bytes")
    assert allocated == {
        frozenset({("run", "r1"), ("rank", str(r)), ("kind", "cuda")}): float(100 + r) for r in (0, 1)
    }
    assert series(samples, "memtui_loss") == {}  # not reported yet: left out, never 0
    assert series(samples, "memtui_rank_step_seconds") == {}  # no rank measured its pace


def test_every_ranks_time_per_step_is_labelled_by_rank_and_part() -> None:
    ranks = [
        RankMemory(
            rank=0, allocated=1, reserved=2, peak=3, capacity=9, step_s=0.2, comm_s=0.3, data_wait_s=0.01
        ),
        RankMemory(
            rank=1, allocated=1, reserved=2, peak=3, capacity=9, step_s=0.45, comm_s=0.05
        ),  # an older trainer
    ]
    status = RunStatus(run_id="r1", name="r", state="running", run_dir="/x", mem_kind="cuda", ranks=ranks)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(lambda: ScrapeFigures(status, None, {}, 0, None, now=0.0)))
    samples = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(generate_latest(registry).decode())
        for s in family.samples
    }
    paces = {
        (dict(labels)["rank"], dict(labels)["part"]): v
        for labels, v in series(samples, "memtui_rank_step_seconds").items()
    }
    assert paces == {
        ("0", "own"): 0.2,
        ("0", "collective"): 0.3,
        ("0", "data_wait"): 0.01,
        ("1", "own"): 0.45,
        ("1", "collective"): 0.05,
    }


def test_the_example_dashboard_and_the_guide_name_only_metrics_that_are_served() -> None:
    sample = TelemetrySample(
        step=5, ts=1.0, samples=10, tokens=100, loss=2.0, lr=1e-3, loss_scale=1024.0,
        step_time_s=0.1, tokens_per_s=1000.0, mfu=0.3, mem_budget=800, micro_batch=2, grad_accum=1,
        metrics={"accuracy": 0.5},
    )  # fmt: skip
    ranks = [RankMemory(rank=0, allocated=1, reserved=2, peak=3, capacity=9, step_s=0.08, comm_s=0.02)]
    status = RunStatus(
        run_id="r1", name="r", state="running", run_dir="/x", step=5, loss=2.0, tokens_per_s=1000.0,
        step_time_s=0.1, data_wait_s=0.01,
        mfu=0.3, loss_scale=1024.0, mem_allocated=1, mem_reserved=2, mem_peak=3, mem_capacity=9,
        mem_kind="cpu-rss", metrics={"accuracy": 0.5}, ranks=ranks, checkpoint_step=4, updated_at=1.0,
        last_eval=EvalSummary(step=4, loss=2.1, metrics={"accuracy": 0.4}),
    )  # fmt: skip
    figures = ScrapeFigures(status, sample, {"heartbeat": "critical"}, 1, LastSave(4, 0.5), now=2.0)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(RunCollector(lambda: figures))
    text = generate_latest(registry).decode()
    served = set(re.findall(r"^(memtui_\w+?)(?:\{| )", text, re.M))
    assert 'memtui_tokens_total{run="r1"} 100.0' in text and 'memtui_samples_total{run="r1"} 10.0' in text
    root = Path(__file__).resolve().parents[2]
    dashboard = (root / "examples" / "grafana-dashboard.json").read_text(encoding="utf-8")
    guide = (root / "docs" / "metrics-exports-serve.md").read_text(encoding="utf-8")
    named = set(re.findall(r"memtui_\w+", dashboard))
    section = guide.split("## Prometheus and Grafana", 1)[1].split("\n## ", 1)[0]
    for expanded in re.findall(r"`(memtui_[\w{},]+?)(?:\{[a-z,]+\})?`", section):
        head, _, rest = expanded.partition("{")
        options, _, tail = rest.partition("}")
        named |= {head + option + tail for option in options.split(",")} if rest else {head}
    assert {"memtui_memory_budget_bytes", "memtui_overflows_total", "memtui_rank_memory_peak_bytes"} <= named
    assert {"memtui_tokens_total", "memtui_samples_total"} <= named  # counters for rate()
    assert named - served == set()
