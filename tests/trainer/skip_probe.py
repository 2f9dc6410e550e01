"""Run as a script: does the trainer's own skip of a step (``skipped_step``) leave a trace?

Two engines from the same seed train steps 0 and 1; one then skips step 2, both train
step 3. Prints one JSON line per precision/stage given on the command line ("fp32:2"):
whether every parameter is equal, and the counters of the one that skipped. A separate
process: DeepSpeed's rendezvous environment must not leak into the test process.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import torch

from engine.config.config_file import build_run_config
from engine.trainer import loop
from engine.trainer.chaos.performers.numerics import skipped_step
from engine.trainer.ranks.process_group import ensure_single_process_env
from engine.trainer.workloads.sample_window import SampleWindow
from engine.trainer.workloads.workload import BatchFn, load_workload


def engine_for(precision: str, stage: int) -> tuple[Any, BatchFn]:
    train = {
        "micro_batch": 4,
        "global_batch": 8,
        "warmup_steps": 2,
        "precision": precision,
        "zero_stage": stage,
    }
    config = build_run_config({"steps": 10, "train": train})
    loop.seed_everything(config.seed)
    workload = load_workload(config)
    return loop.build_engine(config, workload), SampleWindow(workload.batch, 4)


def probe(precision: str, stage: int) -> dict[str, Any]:
    (skipping, batch_a), (plain, batch_b) = engine_for(precision, stage), engine_for(precision, stage)
    for step in range(2):
        loop.train_step(skipping, batch_a, step)
        loop.train_step(plain, batch_b, step)
    loss = skipped_step(skipping, batch_a, 2, float("nan"))
    loop.train_step(skipping, batch_a, 3)
    loop.train_step(plain, batch_b, 3)
    pairs = zip(skipping.module.parameters(), plain.module.parameters(), strict=True)
    return {
        "precision": precision,
        "stage": stage,
        "same": all(torch.equal(p, q) for p, q in pairs),
        "loss": repr(float(loss)),
        "global_steps": int(skipping.global_steps),
        "global_samples": int(skipping.global_samples),
        "skipped_steps": int(skipping.skipped_steps),
    }


if __name__ == "__main__":
    ensure_single_process_env()
    for item in sys.argv[1:]:
        precision, stage = item.split(":")
        print("PROBE " + json.dumps(probe(precision, int(stage))), flush=True)
