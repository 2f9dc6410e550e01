"""What a checkpoint carries that DeepSpeed does not restore by itself (see docs/deepspeed.md,
Checkpoints): written with every save by ``client_state``, read back at a resume (the
data position, the tokens trained, the directives and the cadence in effect).
"""

from __future__ import annotations

from typing import Any

from engine.config.run_config import RunConfig
from engine.rollback import OFFSET_KEY
from engine.trainer.checkpoints.data_cursor import shifted
from engine.trainer.training import Training
from engine.trainer.workloads.step_lengths import StepLengths
from engine.trainer.workloads.workload import Workload


def client_state(training: Training) -> dict[str, Any]:
    """What DeepSpeed does not restore by itself (see docs/deepspeed.md, Checkpoints)."""
    engine = training.engine
    return {
        "step": int(engine.global_steps),  # data position: the next step draws batch(step, ...)
        "samples": int(engine.global_samples),
        "seed": training.config.seed,
        "micro_batch": int(engine.train_micro_batch_size_per_gpu()),
        "grad_accum": int(engine.gradient_accumulation_steps()),
        "world_size": training.telemetry.world_size,
        "overflow_count": training.telemetry.overflow_count,
        "tokens": training.telemetry.tokens,  # trained so far, when sequence lengths vary
        "attempt": training.telemetry.attempt,
        "directives": dict(training.directives.effective),
        "cadence": training.cadence.figures(),  # auto: a restart keeps it
        OFFSET_KEY: training.data_offset,
    }


def step_lengths(config: RunConfig, workload: Workload, offset: int) -> StepLengths | None:
    """Each step's tokens, when the workload's sequence lengths vary (at the data position
    a rollback moved the step to, as its batches are)."""
    if workload.lengths is None:
        return None
    lengths = shifted(workload.lengths, offset)
    return StepLengths(lengths, config.train.micro_batch, config.train.global_batch)


def trained_tokens(lengths: StepLengths | None, client_state: dict[str, Any], step: int) -> int:
    """Tokens trained before ``step`` (varying lengths): the checkpoint's count, else summed."""
    if lengths is None:
        return 0
    saved = client_state.get("tokens")
    return int(saved) if isinstance(saved, int) and saved > 0 else lengths.tokens_before(step)
