"""The Prometheus metric families of one scrape, from ``ScrapeFigures``.

Names by Prometheus conventions: ``memtui_`` prefix, base units in the name (``_bytes``,
``_seconds``, ``_ratio``), ``_total`` on counters; every series labelled by ``run`` (the run
id), per-rank memory by ``rank``, memory by ``kind`` (``cuda`` bytes or the CPU stand-ins,
``engine.domain.MemoryKind``, so nobody mistakes RSS for VRAM). A figure the run has not
reported (no step yet, no fp16 loss scale, no eval) is left out, never reported as 0.

Imported only by ``metrics_endpoint`` once ``metrics.port`` is set: ``prometheus_client`` is
an optional extra. Torch-free.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from engine.domain import Severity
from engine.supervisor.metrics.scrape_figures import ScrapeFigures

# (metric name, RunStatus field, help) of the run-wide gauges read from the status as they are.
_STATUS_GAUGES = (
    ("memtui_step", "step", "Optimizer steps completed (the newest step reported)."),
    ("memtui_target_steps", "target_steps", "Optimizer steps the run is configured to reach."),
    ("memtui_last_step_timestamp_seconds", "updated_at", "Unix time the newest step finished."),
    ("memtui_loss", "loss", "Training loss of the newest step (nats per token)."),
    ("memtui_tokens_per_second", "tokens_per_s", "Tokens per second of the newest step, all ranks."),
    ("memtui_mfu_ratio", "mfu", "Model FLOPs utilisation of the newest step (0-1)."),
    ("memtui_step_seconds", "step_time_s", "Wall time of the newest step."),
    (
        "memtui_data_wait_seconds",
        "data_wait_s",
        "Seconds of the newest step the trainer waited for its batches (data starvation).",
    ),
    ("memtui_loss_scale", "loss_scale", "fp16 dynamic loss scale (absent under bf16/fp32)."),
    (
        "memtui_checkpoint_step",
        "checkpoint_step",
        "Step of the newest verified checkpoint (where a resume starts).",
    ),
)
# (name suffix, RunStatus field, RankMemory field) of the memory gauges.
_MEMORY = (
    ("allocated", "mem_allocated", "allocated"),
    ("reserved", "mem_reserved", "reserved"),
    ("peak", "mem_peak", "peak"),
    ("capacity", "mem_capacity", "capacity"),
)


def families(figures: ScrapeFigures) -> list[Metric]:
    """Every metric family of this scrape."""
    run = figures.status.run_id
    return [
        *_run_info(figures),
        *_status_gauges(figures),
        *_memory(figures),
        *_counters(figures),
        *_alerts(figures),
        *_checkpoint(figures),
        *_named(
            "memtui_workload_metric",
            "The workload's own scalars of the newest step.",
            run,
            figures.status.metrics,
        ),
        *_eval(figures),
    ]


def _gauge(name: str, doc: str, run: str, value: float | None) -> Iterator[Metric]:
    """One run-labelled gauge; nothing when the run has not reported the figure."""
    if value is not None:
        family = GaugeMetricFamily(name, doc, labels=["run"])
        family.add_metric([run], float(value))
        yield family


def _run_info(figures: ScrapeFigures) -> Iterator[Metric]:
    status = figures.status
    info = GaugeMetricFamily(
        "memtui_run_info", "The run (always 1): its name and state.", labels=["run", "name", "state"]
    )
    info.add_metric([status.run_id, status.name, status.state], 1.0)
    yield info


def _status_gauges(figures: ScrapeFigures) -> Iterator[Metric]:
    for name, field, doc in _STATUS_GAUGES:
        yield from _gauge(name, doc, figures.status.run_id, getattr(figures.status, field))
    pending = "Directives waiting for an operator's decision."
    yield from _gauge("memtui_directives_pending", pending, figures.status.run_id, figures.pending_directives)


def _memory(figures: ScrapeFigures) -> Iterator[Metric]:
    """The reporting rank's memory and budget (kind-labelled), every rank's where reported."""
    status, run = figures.status, figures.status.run_id
    kind = status.mem_kind or "unknown"
    values = {suffix: getattr(status, field) for suffix, field, _ in _MEMORY}
    values["budget"] = figures.sample.mem_budget if figures.sample is not None else None
    for suffix, value in values.items():
        if value is not None:
            name, doc = f"memtui_memory_{suffix}_bytes", f"Memory {suffix} (bytes)."
            family = GaugeMetricFamily(name, doc, labels=["run", "kind"])
            family.add_metric([run, kind], float(value))
            yield family
    for suffix, _, rank_field in _MEMORY if status.ranks else ():
        doc = f"Memory {suffix} of each rank as of its newest rank report (bytes)."
        family = GaugeMetricFamily(f"memtui_rank_memory_{suffix}_bytes", doc, labels=["run", "rank", "kind"])
        for rank in status.ranks or []:
            family.add_metric([run, str(rank.rank), kind], float(getattr(rank, rank_field)))
        yield family
    yield from _rank_pace(figures)


_PACE = (("own", "step_s"), ("collective", "comm_s"), ("data_wait", "data_wait_s"))
"""(``part`` label, RankMemory field) of each rank's time per step: its own work up to the
gradient collective, the collective to the step's end, its wait for batches."""


def _rank_pace(figures: ScrapeFigures) -> Iterator[Metric]:
    """Each rank's mean seconds per step by part, as of its newest rank report (on CUDA the
    device's time); nothing for a part no rank measured."""
    status, run = figures.status, figures.status.run_id
    family = GaugeMetricFamily(
        "memtui_rank_step_seconds",
        "Each rank's mean seconds per step, by part (own work, collective, data wait).",
        labels=["run", "rank", "part"],
    )
    for rank in status.ranks or []:
        for part, field in _PACE:
            seconds = getattr(rank, field)
            if seconds is not None:
                family.add_metric([run, str(rank.rank), part], float(seconds))
    if family.samples:
        yield family


def _counters(figures: ScrapeFigures) -> Iterator[Metric]:
    run, sample = figures.status.run_id, figures.sample
    counts = [("memtui_restarts", "Trainer restarts of the run.", figures.status.restarts)]
    if sample is not None:
        counts += [
            ("memtui_tokens", "Tokens trained so far, all ranks (rate() of it: tokens/s).", sample.tokens),
            ("memtui_samples", "Samples trained so far, all ranks.", sample.samples),
            ("memtui_overflows", "fp16 overflows so far in the run.", sample.overflow_count),
            ("memtui_skipped_steps", "Optimizer steps skipped so far (overflows).", sample.skipped_steps),
        ]
    for name, doc, value in counts:
        family = CounterMetricFamily(name, doc, labels=["run"])  # the client adds ``_total``
        family.add_metric([run], float(value))
        yield family


def _alerts(figures: ScrapeFigures) -> Iterator[Metric]:
    """One series per firing rule, and how many fire at each severity (zeros included)."""
    run = figures.status.run_id
    firing = GaugeMetricFamily(
        "memtui_alert_firing", "1 for each alert rule firing now.", labels=["run", "rule", "severity"]
    )
    for rule, severity in sorted(figures.alerts.items()):
        firing.add_metric([run, rule, severity], 1.0)
    yield firing
    counts = GaugeMetricFamily(
        "memtui_alerts_by_severity", "Alert rules firing now.", labels=["run", "severity"]
    )
    for severity in get_args(Severity):
        counts.add_metric([run, severity], float(sum(1 for s in figures.alerts.values() if s == severity)))
    yield counts


def _checkpoint(figures: ScrapeFigures) -> Iterator[Metric]:
    saved, run = figures.last_save, figures.status.run_id
    if saved is None:
        return
    yield from _gauge(
        "memtui_checkpoint_last_save_step", "Step of the newest checkpoint saved.", run, saved.step
    )
    stamp = "Unix time the newest checkpoint was saved."
    yield from _gauge("memtui_checkpoint_last_save_timestamp_seconds", stamp, run, saved.ts)
    age = "Seconds since the newest checkpoint was saved, at the scrape."
    yield from _gauge("memtui_checkpoint_age_seconds", age, run, max(0.0, figures.now - saved.ts))


def _eval(figures: ScrapeFigures) -> Iterator[Metric]:
    last, run = figures.status.last_eval, figures.status.run_id
    if last is None:
        return
    yield from _gauge(
        "memtui_eval_loss", "Held-out loss of the newest eval (nats per token).", run, last.loss
    )
    yield from _gauge("memtui_eval_step", "Step of the newest eval.", run, last.step)
    yield from _named(
        "memtui_eval_metric", "The workload's own scalars of the newest eval.", run, last.metrics
    )


def _named(name: str, doc: str, run: str, values: dict[str, float] | None) -> Iterator[Metric]:
    """One series per named scalar (label ``name``); nothing when there are none."""
    if values:
        family = GaugeMetricFamily(name, doc, labels=["run", "name"])
        for key, value in sorted(values.items()):
            family.add_metric([run, key], float(value))
        yield family
