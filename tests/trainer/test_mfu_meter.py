"""The trainer's MFU meter: FLOPs per token from the config, the peak from the config, the
table or the CPU's matmul probe, and the per-step figures."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from engine.config.config_file import build_run_config
from engine.config.run_config import RunConfig
from engine.memory.flops import flops_per_token
from engine.memory.transformer_shape import TransformerShape, from_model_config
from engine.trainer.telemetry import mfu_meter
from engine.trainer.telemetry.mfu_meter import MfuMeter, build_meter, kept_cpu_peak, probe_cpu_peak
from engine.trainer.workloads.built_model import describe_built
from engine.trainer.workloads.model import ByteTransformer
from engine.trainer.workloads.workload import Workload


def test_meter_figures_on_a_known_case() -> None:
    meter = MfuMeter(flops_per_token=6e9, peak_tflops=60.0, peak_source="config", devices=1)
    assert meter.figures(1000.0) == pytest.approx({"mfu": 0.1, "model_tflops": 6.0})
    unknown = MfuMeter(flops_per_token=6e9, peak_tflops=None, peak_source="unknown", devices=1)
    assert unknown.figures(1000.0) == {"mfu": None, "model_tflops": pytest.approx(6.0)}


def test_a_step_above_the_peak_gives_no_mfu() -> None:
    """A peak under-measured (a CPU probe on a loaded machine): 121.8% is not a utilisation."""
    meter = MfuMeter(flops_per_token=6e9, peak_tflops=5.0, peak_source="measured", devices=1)
    assert meter.figures(1015.0) == {"mfu": None, "model_tflops": pytest.approx(6.09)}
    assert meter.figures(830.0)["mfu"] == pytest.approx(0.996)


def test_built_in_model_counts_its_shape_and_the_config_peak_wins() -> None:
    config = build_run_config({"hardware": {"peak_tflops": 2.5}})
    workload = Workload(ByteTransformer(config.model), lambda *_: (), 1, shape=shape_of(config))
    meter = build_meter(config, describe_built(workload, config), torch.device("cpu"), 1)
    m = config.model
    assert meter.flops_per_token == flops_per_token(
        from_model_config(m.n_layer, m.n_head, m.d_model, m.seq_len)
    )
    assert (meter.peak_tflops, meter.peak_source) == (2.5, "config")


def shape_of(config: RunConfig) -> TransformerShape:
    m = config.model
    return from_model_config(m.n_layer, m.n_head, m.d_model, m.seq_len)


def test_cpu_probe_measures_a_positive_peak() -> None:
    assert 0 < probe_cpu_peak("fp32") < 100  # TFLOP/s: a CPU core does GFLOP/s, not PFLOP/s


def test_the_cpu_probe_gives_the_threads_back() -> None:
    """It measures one thread too (a loaded host preempts a parallel multiply): training
    goes on with the threads it had."""
    threads = torch.get_num_threads()
    probe_cpu_peak("fp32")
    assert torch.get_num_threads() == threads


def test_the_cpu_probe_leaves_the_global_rng_alone() -> None:
    """It runs after a resume restored the checkpoint's RNG: every later dropout mask and
    random draw must be what an uninterrupted run would have had."""
    torch.manual_seed(7)
    expected = torch.rand(3)
    torch.manual_seed(7)
    probe_cpu_peak("fp32")
    assert torch.equal(torch.rand(3), expected)


def test_a_restart_reads_the_cpu_peak_its_run_probed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The first attempt probes and keeps the figure; a later one (a restart) reads it back
    instead of probing for half a second before its first step."""
    kept = tmp_path / mfu_meter.CPU_PEAK_FILE
    first = kept_cpu_peak(kept, "fp32")
    assert kept.exists() and first > 0

    def no_probe(precision: str) -> float:
        raise AssertionError("probed again")

    monkeypatch.setattr(mfu_meter, "probe_cpu_peak", no_probe)
    assert kept_cpu_peak(kept, "fp32") == first
    with pytest.raises(AssertionError, match="probed again"):
        kept_cpu_peak(kept, "bf16")  # another precision: its own probe
