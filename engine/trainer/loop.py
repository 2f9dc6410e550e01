"""The training loop: DeepSpeed on one process (or one rank of torchrun), reporting each step.

Reads top to bottom::

    train()
      set up the world, seed, build the workload and the DeepSpeed engine
      resume from the newest checkpoint, if any
      run_steps(): until the target step or a stop request
          train_step()       grad_accum x (forward, backward, engine.step())
          report_step()      TelemetrySample -> StepReport, every log_every steps
          maybe_checkpoint() every checkpoint.every_steps
      final checkpoint, trainer_finished

``train_step`` is the whole of the DeepSpeed work; everything else is bookkeeping that
``bench/overhead.py`` measures against a bare loop of ``train_step`` alone.
"""

from __future__ import annotations

import logging
import os
import random
import time
from dataclasses import dataclass
from typing import Any, Literal

import torch

from engine.domain import RunConfig
from engine.protocol import StepReport
from engine.rundir import RunDir
from engine.trainer import checkpoint
from engine.trainer.deepspeed_compat import allow_cpu_fp16, needs_manual_loss_scale, scaled_for_backward
from engine.trainer.deepspeed_config import build_deepspeed_config
from engine.trainer.link import Link
from engine.trainer.lr_schedule import warmup_cosine
from engine.trainer.memory_probe import MemoryProbe
from engine.trainer.model import parameter_count
from engine.trainer.process_group import ensure_single_process_env, world_size
from engine.trainer.step_telemetry import StepTelemetry, loss_scale
from engine.trainer.workload import BatchFn, Workload, load_workload

log = logging.getLogger(__name__)

Outcome = Literal["completed", "stopped"]


@dataclass
class Training:
    """Everything the loop touches, built once by ``train`` (or by the bench)."""

    config: RunConfig
    engine: Any  # deepspeed.DeepSpeedEngine
    workload: Workload
    link: Link
    telemetry: StepTelemetry
    run: RunDir | None = None
    """Where checkpoints go; None (bench) saves none."""
    last_saved_step: int = -1


# ------------------------------------------------------------------------- the loop


def train(config: RunConfig, run: RunDir, attempt: int, link: Link) -> Outcome:
    """Train to ``config.steps`` or until asked to stop; checkpoint either way."""
    ensure_single_process_env()
    try:
        return _train(config, run, attempt, link)
    finally:
        leave_process_group()


def _train(config: RunConfig, run: RunDir, attempt: int, link: Link) -> Outcome:
    share_cpu_cores()
    seed_everything(config.seed)
    workload = load_workload(config)
    engine = build_engine(config, workload)
    resumed = checkpoint.load_latest(engine, run.checkpoints)
    training = Training(
        config=config,
        engine=engine,
        workload=workload,
        link=link,
        telemetry=StepTelemetry(
            engine,
            MemoryProbe(engine.device),
            workload.tokens_per_sample,
            world_size(),
            attempt,
            overflow_count=int(resumed.client_state.get("overflow_count", 0)) if resumed else 0,
        ),
        run=run,
        last_saved_step=resumed.step if resumed else -1,
    )
    announce_start(training, attempt, resumed)

    run_steps(training, until=config.steps)

    outcome: Outcome = "completed" if engine.global_steps >= config.steps else "stopped"
    if training.last_saved_step != engine.global_steps:
        save_checkpoint(training)
    link.event(
        "trainer_finished",
        f"training {outcome} at step {engine.global_steps}",
        reason=outcome,
        step=int(engine.global_steps),
    )
    return outcome


def run_steps(training: Training, until: int) -> None:
    """Optimizer steps until ``engine.global_steps == until`` or a stop request."""
    engine, config = training.engine, training.config
    stop = training.link.stop_requested
    while engine.global_steps < until and not stop.is_set():
        step = engine.global_steps  # 0-based index of the step about to run = data position
        lr = engine.get_lr()[0]  # the scheduler set it for this step
        scale = loss_scale(engine)  # the scale this step's backward uses
        started = time.perf_counter()

        loss = train_step(engine, training.workload.batch, step)

        step_time_s = time.perf_counter() - started
        overflow = training.telemetry.note_step()
        if engine.global_steps % config.log_every == 0:
            report_step(training, loss, lr, scale, overflow, step_time_s)
        maybe_checkpoint(training)


def train_step(engine: Any, batch: BatchFn, step: int) -> torch.Tensor:
    """One optimizer step: grad_accum x (forward, backward), the optimizer at the boundary.

    Returns the mean loss over the micro-batches, a detached 0-dim tensor (no host sync).
    """
    grad_accum = engine.gradient_accumulation_steps()
    micro_batch = engine.train_micro_batch_size_per_gpu()
    manual_scale = needs_manual_loss_scale(engine)  # DeepSpeed 0.19.8 stage-0 fp16 gap
    total = torch.zeros((), device=engine.device)
    for micro in range(grad_accum):
        inputs = [t.to(engine.device, non_blocking=True) for t in batch(step, micro, micro_batch)]
        loss = engine(*inputs)  # the workload's forward returns the scalar loss
        engine.backward(scaled_for_backward(engine, loss, manual_scale))  # also divides by grad_accum
        engine.step()  # only steps the optimizer at the accumulation boundary
        total += loss.detach().float()
    return total / grad_accum


def report_step(
    training: Training, loss: torch.Tensor, lr: float, scale: float | None, overflow: bool, step_time_s: float
) -> None:
    sample = training.telemetry.sample(
        loss=float(loss.item()),
        lr=float(lr),
        scale_during_step=scale,
        overflow=overflow,
        step_time_s=step_time_s,
    )
    training.link.send(StepReport(sample=sample))


def maybe_checkpoint(training: Training) -> None:
    every = training.config.checkpoint.every_steps
    if training.run is not None and every and training.engine.global_steps % every == 0:
        save_checkpoint(training)


def save_checkpoint(training: Training) -> None:
    if training.run is None:
        return
    engine, config = training.engine, training.config
    saved = checkpoint.save(engine, training.run.checkpoints, config.checkpoint.keep, client_state(training))
    training.last_saved_step = saved.step
    training.link.event(
        "checkpoint_saved",
        f"checkpoint {saved.tag} saved in {saved.seconds:.2f} s",
        step=saved.step,
        tag=saved.tag,
        seconds=round(saved.seconds, 4),
        pruned=saved.pruned,
    )


def client_state(training: Training) -> dict[str, Any]:
    """What DeepSpeed does not restore by itself (see DEEPSPEED-NOTES: Checkpoints)."""
    engine = training.engine
    return {
        "step": int(engine.global_steps),  # data position: the next step draws batch(step, ...)
        "samples": int(engine.global_samples),
        "seed": training.config.seed,
        "micro_batch": int(engine.train_micro_batch_size_per_gpu()),
        "grad_accum": int(engine.gradient_accumulation_steps()),
        "world_size": training.telemetry.world_size,
        "overflow_count": training.telemetry.overflow_count,
        "attempt": training.telemetry.attempt,
    }


# ------------------------------------------------------------------------- set-up


def share_cpu_cores() -> None:
    """On a CPU-only host, leave one core to the supervisor and the console.

    Two intra-op threads on a 2-core machine that also runs the console stall each other:
    measured with bench/tiny_speed.py, tiny ran a steady ~58 steps/s on 1 thread but
    swung between ~10 and ~100 steps/s on 2 under other load. OMP_NUM_THREADS wins.
    """
    if torch.cuda.is_available() or "OMP_NUM_THREADS" in os.environ:
        return
    torch.set_num_threads(max(1, (os.cpu_count() or 1) - 1))


def seed_everything(seed: int) -> None:
    """Model init is a function of the seed (the data order is seeded per batch)."""
    random.seed(seed)
    torch.manual_seed(seed)


def build_engine(config: RunConfig, workload: Workload) -> Any:
    """``deepspeed.initialize`` with our config; returns the engine."""
    import deepspeed  # imported here: slow, and `--help` should not pay for it

    if config.train.precision == "fp16":
        allow_cpu_fp16()
    ds_config = build_deepspeed_config(config, world_size())
    params = [p for p in workload.model.parameters() if p.requires_grad]
    # A client scheduler wins over the config's in DeepSpeed: pass ours only if the user has none.
    scheduler = None if "scheduler" in ds_config else warmup_cosine(config)
    engine, _optimizer, _loader, _scheduler = deepspeed.initialize(
        model=workload.model, model_parameters=params, config=ds_config, lr_scheduler=scheduler
    )
    return engine


def leave_process_group() -> None:
    """Tear down torch.distributed so the process exits cleanly (and can train again)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def announce_start(training: Training, attempt: int, resumed: checkpoint.Resumed | None) -> None:
    engine, config = training.engine, training.config
    if resumed is not None:
        if resumed.step != engine.global_steps:
            log.warning("checkpoint says step %d, DeepSpeed restored %d", resumed.step, engine.global_steps)
        training.link.event(
            "checkpoint_loaded", f"resumed from {resumed.tag}", step=resumed.step, tag=resumed.tag
        )
    device = engine.device.type if isinstance(engine.device, torch.device) else str(engine.device)
    training.link.event(
        "trainer_started",
        f"attempt {attempt} on {device}, step {engine.global_steps} of {config.steps}",
        attempt=attempt,
        pid=os.getpid(),
        device=device,
        world_size=training.telemetry.world_size,
        params=parameter_count(training.workload.model),
        precision=config.train.precision,
        zero_stage=config.train.zero_stage,
        micro_batch=int(engine.train_micro_batch_size_per_gpu()),
        grad_accum=int(engine.gradient_accumulation_steps()),
        resumed_from_step=resumed.step if resumed else None,
    )
