"""What a trainer says when it starts: the checkpoint it loaded (``checkpoint_loaded``) and
its own start (``trainer_started``: device, geometry, the model built (its description),
the MFU terms and the plan's memory for this configuration)."""

from __future__ import annotations

import logging
import os

import torch

from engine.events import CheckpointLoaded, TrainerStarted
from engine.trainer.checkpoints import checkpoint
from engine.trainer.memory.planned_memory import planned_memory
from engine.trainer.training import Training

log = logging.getLogger(__name__)


def announce_start(training: Training, attempt: int, resumed: checkpoint.Resumed | None) -> None:
    engine, config = training.engine, training.config
    if resumed is not None:
        if resumed.step != engine.global_steps:
            log.warning("checkpoint says step %d, DeepSpeed restored %d", resumed.step, engine.global_steps)
        training.link.event(
            CheckpointLoaded(
                step=resumed.step,
                tag=resumed.tag,
                skipped=resumed.skipped,
                converted_from_world=resumed.converted_from_world,
            ),
            f"resumed from {resumed.tag}"
            + (f", skipped {len(resumed.skipped)} newer" if resumed.skipped else "")
            + (
                f", written by {resumed.converted_from_world} ranks (universal conversion)"
                if resumed.converted_from_world
                else ""
            ),
        )
    description = training.described()
    device = engine.device.type if isinstance(engine.device, torch.device) else str(engine.device)
    started = TrainerStarted(
        attempt=attempt,
        pid=os.getpid(),
        device=device,
        world_size=training.telemetry.world_size,
        params=description.params,
        precision=config.train.precision,
        zero_stage=config.train.zero_stage,
        micro_batch=int(engine.train_micro_batch_size_per_gpu()),
        grad_accum=int(engine.gradient_accumulation_steps()),
        resumed_from_step=resumed.step if resumed else None,
        planned_memory=planned_memory(config, description, training.telemetry.world_size, device),
        model_description=description.as_wire(),
        activation_checkpointing=config.train.activation_checkpointing,
        **training.telemetry.peak_fields(),
    )
    recompute = ", activation checkpointing on" if started.activation_checkpointing else ""
    training.link.event(
        started,
        f"attempt {attempt} on {device}, step {engine.global_steps} of {config.steps}{recompute}; "
        f"{description.words}",
    )
