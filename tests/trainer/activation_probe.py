"""Run as a script: what a real DeepSpeed engine on the CPU uses per sample for a Hugging
Face model, against the memory prior memtui builds for it.

    python tests/trainer/activation_probe.py CONFIG.json   ->   one JSON line

CONFIG.json is a run config (with ``[hf]``) plus ``probe_micro_batches``. Three optimizer
steps at each micro-batch, smallest first, and after each size two figures: the process's
high-water RSS (``ru_maxrss``: whole steps, the backward's peak included, the CPU's
stand-in for a device's peak) and the largest step peak as the trainer measures it
(``MemoryProbe``: the RSS after the forward). In a fresh process: each engine gets its own
torch.distributed world.
"""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path
from typing import Any

import torch

from engine.config.config_file import build_run_config
from engine.trainer.engine_setup import build_engine, share_cpu_cores
from engine.trainer.memory.memory_prior import build_memory_model
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.ranks.process_group import ensure_single_process_env
from engine.trainer.workloads.built_model import describe_built
from engine.trainer.workloads.hf_workload import hf_workload

STEPS = 3  # per micro-batch: the first one also allocates the optimizer's states


def step_peaks(engine: Any, batch: Any, micro_batch: int, probe: MemoryProbe) -> int:
    """The largest per-step peak (bytes) of ``STEPS`` steps at ``micro_batch``."""
    engine.set_train_micro_batch_size(micro_batch)  # gradient accumulation stays 1
    peaks = []
    for step in range(STEPS):
        probe.begin_step()
        loss = engine(*batch(step, 0, micro_batch))
        engine.backward(loss)
        engine.step()
        del loss
        peaks.append(probe.end_step()[0])
    return max(peaks)


def sample(probe: MemoryProbe) -> None:
    """The RSS after a forward, into the step's peak (a hook's return value would replace
    the forward's output: None)."""
    probe.note()


def main() -> None:
    raw = json.loads(Path(sys.argv[1]).read_text(encoding="utf-8"))
    sizes = raw.pop("probe_micro_batches")
    ensure_single_process_env()
    share_cpu_cores()
    config = build_run_config(raw)
    workload = hf_workload(config, Path(sys.argv[1]).parent / "cache")
    description = describe_built(workload, config)
    prior = build_memory_model(config, description, 1)
    engine = build_engine(config, workload)
    probe = MemoryProbe(torch.device("cpu"))
    workload.model.register_forward_hook(lambda *_: sample(probe))  # as the trainer samples it
    after_forward, high_water = {}, {}
    for size in sizes:
        after_forward[str(size)] = step_peaks(engine, workload.batch, size, probe)
        high_water[str(size)] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(
        json.dumps(
            {
                "params": description.params,
                "prior_per_sample": prior.per_sample,
                "prior_states": prior.model_states,
                "high_water": high_water,
                "after_forward": after_forward,
            }
        )
    )


if __name__ == "__main__":
    main()
