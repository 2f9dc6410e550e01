"""The training loop: DeepSpeed on one process (or one rank of torchrun), reporting each step.

Reads top to bottom::

    train()
      set up the world, seed, build the workload and the DeepSpeed engine
      with several ranks: a RankLink (rank 0 speaks for all; stop and directives agreed)
      resume from the newest checkpoint, if any (rank 0 chooses, every rank loads)
      equip()            memory, directives, chaos, metrics, evaluator, cadence, built once
                         (training_parts; the benches build theirs the same way)
      run_steps(): until the target step or a stop request
          link.sync()        several ranks: agree on stop, pause and directives at the boundary
          hold()             while the operator has paused training
          chaos              injections the supervisor asked for take effect (chaos_injections)
          memory.run_step()  the controlled step (an OOM: shrink, redo), chaos's step hook inside:
          train_step()       grad_accum x (forward, backward, engine.step()); the workload's
                             own scalars summed on the device (step_metrics)
          report_step()      TelemetrySample (with those scalars' means) -> StepReport,
                             every log_every steps
          evaluate           a held-out loss every eval.every_steps steps (evaluation)
          exchange_memory()  several ranks: every rank's memory, every rank_report_every steps
          collect_sealed()   report a checkpoint sealed in the background meanwhile
          maybe_checkpoint() every checkpoint.every_steps, or as the auto cadence decides
                             (the write; the seal goes on behind)
      final checkpoint (sealed before exit), trainer_finished

``train_step`` is the whole of the DeepSpeed work; everything else is bookkeeping that
``bench/overhead.py`` measures against a bare loop of ``train_step`` alone.
"""

from __future__ import annotations

import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any, Literal

import torch

from engine.checkpoints.sealer import CheckpointSealer
from engine.config.deepspeed_config import build_deepspeed_config
from engine.config.run_config import RunConfig
from engine.events import (
    RunContinued,
    RunPaused,
    TrainerFinished,
)
from engine.run.directory import RunDir
from engine.run.flight_recorder import flight_recorder_env
from engine.trainer.checkpoints import checkpoint
from engine.trainer.checkpoints.data_cursor import offset_of, shifted
from engine.trainer.checkpoints.save_report import report_save
from engine.trainer.client_state import client_state, step_lengths, trained_tokens
from engine.trainer.core_share import CoreShare
from engine.trainer.deepspeed_compat import needs_manual_loss_scale, scaled_for_backward
from engine.trainer.engine_setup import build_engine, leave_process_group, seed_everything, share_cpu_cores
from engine.trainer.link import Link
from engine.trainer.memory.memory_probe import MemoryProbe
from engine.trainer.op_cache import prepare_ops
from engine.trainer.ranks.process_group import ensure_single_process_env, world_size
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.ranks.rank_link import RankLink
from engine.trainer.start_report import announce_start
from engine.trainer.telemetry.mfu_meter import CPU_PEAK_FILE, build_meter
from engine.trainer.telemetry.rank_memory import DeviceClock, RankPace, exchange_memory
from engine.trainer.telemetry.startup_phases import StartupPhases
from engine.trainer.telemetry.step_metrics import StepMetrics
from engine.trainer.telemetry.step_telemetry import StepTelemetry, loss_scale
from engine.trainer.training import Training
from engine.trainer.training_parts import equip
from engine.trainer.workloads.built_model import describe_built
from engine.trainer.workloads.forward_output import split_output
from engine.trainer.workloads.hf_workload import hf_workload
from engine.trainer.workloads.prefetcher import Prefetcher
from engine.trainer.workloads.sample_window import for_rank
from engine.trainer.workloads.workload import BatchFn, load_workload
from engine.wire.protocol import StepReport

log = logging.getLogger(__name__)

TrainingEnd = Literal["completed", "stopped"]
HOLD_POLL_S = 0.5  # s between looks at the link while paused (several ranks: one agreement each)


# ------------------------------------------------------------------------- the loop


def train(
    config: RunConfig,
    run: RunDir,
    attempt: int,
    link: Link,
    allow_fresh: bool = False,
    phases: StartupPhases | None = None,
) -> TrainingEnd:
    """Train to ``config.steps`` or until asked to stop; checkpoint either way.

    ``allow_fresh``: start at step 0 if checkpoints exist but none verifies (else refuse).
    ``phases``: says the start-up's phases on the link (``__main__``'s began before the imports).
    """
    ensure_single_process_env()
    try:
        outcome = _train(config, run, attempt, link, allow_fresh, phases or StartupPhases(link, attempt))
    except BaseException:
        leave_process_group(meet=False)  # the other ranks may never arrive: torchrun ends them
        raise
    leave_process_group(meet=True)
    return outcome


def _train(
    config: RunConfig, run: RunDir, attempt: int, link: Link, allow_fresh: bool, phases: StartupPhases
) -> TrainingEnd:
    share_cpu_cores()
    seed_everything(config.seed)
    workload = hf_workload(config, run.token_cache) if config.hf.model_dir else load_workload(config)
    description = describe_built(workload, config)  # before ZeRO-3 partitions the parameters
    prepare_ops(build_deepspeed_config(config, world_size()), phases.op)  # a build or a wait, if any
    # NCCL's flight recorder, read when the process group is made (build_engine joins it)
    os.environ.update(flight_recorder_env(os.environ, run.path, torch.cuda.is_available()))
    phases.enter("initialising")
    engine = build_engine(config, workload)
    ranks = RankGroup.of_engine(engine)
    if ranks.world > 1:
        link = RankLink(link, ranks)  # rank 0 speaks for all; stop and directives agreed
    store = checkpoint.store_for(config, run)
    on_load = lambda tag: phases.enter("loading_checkpoint", tag=tag)  # noqa: E731
    resumed = checkpoint.resume(engine, store, allow_fresh, link, ranks, before_load=on_load)
    offset = offset_of(store.directory, resumed)  # data skipped by a rollback, in steps
    lengths = step_lengths(config, workload, offset)
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
            meter=build_meter(config, description, engine.device, world_size(), run.path / CPU_PEAK_FILE),
            lengths=lengths,
            tokens=trained_tokens(lengths, resumed.client_state if resumed else {}, int(engine.global_steps)),
        ),
        run=run,
        last_saved_step=resumed.step if resumed else -1,
        resumed_directives=dict(resumed.client_state.get("directives") or {}) if resumed else {},
        ranks=ranks,
        sealer=CheckpointSealer() if config.checkpoint.background and ranks.leader else None,
        description=description,
        data_offset=offset,
    )
    if str(getattr(engine.device, "type", engine.device)) == "cuda":
        training.pace = RankPace(DeviceClock())  # the device's time, not the host's launches
    announce_start(training, attempt, resumed)
    equip(training, resumed.client_state.get("cadence") if resumed else None)
    training.memory.resume_geometry()  # a smaller micro-batch an earlier attempt asked for
    phases.enter("first_step")  # over when its StepReport arrives

    try:
        run_steps(training, until=config.steps)
    except BaseException:
        settle_sealing(training)  # a crash too: a written save is worth sealing
        raise
    collect_sealed(training, wait=True)

    outcome: TrainingEnd = "completed" if engine.global_steps >= config.steps else "stopped"
    if ranks.max_ints([training.last_saved_step != engine.global_steps])[0]:
        save_checkpoint(training, background=False)  # durable before the trainer exits
    if training.sealer is not None:
        training.sealer.close()  # idle by now: ends its thread
    training.memory.raise_if_halted()  # OOM at the smallest micro-batch, loss-scale floor
    link.event(
        TrainerFinished(reason=outcome, step=int(engine.global_steps)),
        f"training {outcome} at step {engine.global_steps}",
    )
    return outcome


def run_steps(training: Training, until: int) -> None:
    """Optimizer steps until ``engine.global_steps == until``, a stop request or a memory halt
    (``training`` equipped: ``training_parts.equip``). The batches come through a
    ``Prefetcher`` (built ahead unless ``train.prefetch`` is off), which also times the wait."""
    engine, config, ranks, memory = training.engine, training.config, training.ranks, training.memory
    # a step's samples whatever the geometry; each rank its own share of them
    shifted_batch = shifted(training.workload.batch, training.data_offset)  # a rollback's skip
    device = getattr(engine, "device", None)  # torch.device or its name; a test's stub has none
    on_cpu = str(getattr(device, "type", device)) == "cpu"
    window = memory.window(for_rank(shifted_batch, ranks.rank, ranks.world), training.workload.pad)
    ahead = not on_cpu if config.train.prefetch == "auto" else bool(config.train.prefetch)
    feed = Prefetcher(window, engine.gradient_accumulation_steps, ahead=ahead, pin=ahead and not on_cpu)
    try:
        _run_steps(training, until, memory.drawing(feed), feed, on_cpu)
    finally:
        feed.close()


def _run_steps(training: Training, until: int, batch: BatchFn, feed: Prefetcher, on_cpu: bool) -> None:
    engine, config, ranks = training.engine, training.config, training.ranks
    stop = training.link.stop_requested
    agree = training.link.sync if isinstance(training.link, RankLink) else None
    memory, directives, chaos = training.memory, training.directives, training.chaos
    metrics, evaluator, cadence = training.metrics, training.evaluator, training.cadence
    report_every = config.train.rank_report_every
    cores = CoreShare(torch.get_num_threads(), torch.set_num_threads, enabled=on_cpu)
    while engine.global_steps < until and memory.halted is None:
        if agree is not None:
            agree()  # every rank: the same stop, pause and directives at this boundary
        if training.link.pause_requested.is_set():
            hold(training, agree)
        if stop.is_set():
            break
        cores.at_boundary(training.link.cores_for_others)  # a spare warming up gets a core
        step = engine.global_steps  # 0-based index of the step about to run = data position
        directives.at_boundary(step)  # admitted directives; a micro-batch one takes effect below
        chaos.at_boundary(step)  # injections asked for take effect (ballast before the reading below)
        memory.before_step(step)  # the controller may change the geometry here, and only here
        lr = engine.get_lr()[0]  # the scheduler set it for this step
        scale = loss_scale(engine)  # the scale this step's backward uses
        sums = StepMetrics()  # this step's own: a step chaos skips reports none
        started = time.perf_counter()
        feed.take_waited()  # this step's data-wait from here (an eval's batches are not in it)
        training.pace.start()  # before chaos's delay: a slowed rank's own time includes it

        step_fn = functools.partial(train_step, sums=sums, pace=training.pace)
        loss = memory.run_step(step_fn, engine, batch, step, hook=chaos.hook)  # an OOM: shrink, redo
        if loss is None:
            break  # the memory path gave up (see memory.halted): checkpoint and stop

        step_time_s = time.perf_counter() - started
        cadence.note_step(step_time_s)
        data_wait_s = feed.take_waited()
        training.pace.waited_for_data(data_wait_s)
        training.pace.finish()
        overflow = training.telemetry.note_step()
        memory.after_step(overflow, scale)  # calibrate the model; watch the loss-scale floor
        if ranks.world > 1 and engine.global_steps % report_every == 0:
            training.telemetry.ranks = exchange_memory(ranks, training.telemetry.probe, training.pace)
        if engine.global_steps % config.log_every == 0:
            named = metrics.of_step(sums, int(engine.global_steps))  # a collective with several ranks
            report_step(training, loss, lr, scale, overflow, step_time_s, named, data_wait_s)
        evaluator.at_boundary(int(engine.global_steps))  # every rank, when due
        collect_sealed(training)
        maybe_checkpoint(training)


def train_step(
    engine: Any, batch: BatchFn, step: int, sums: StepMetrics | None = None, pace: RankPace | None = None
) -> torch.Tensor:
    """One optimizer step: grad_accum x (forward, backward), the optimizer at the boundary.

    Returns the mean loss over the micro-batches, a detached 0-dim tensor (no host sync).
    The workload's own scalars (a forward returning ``(loss, {name: value})``) are summed
    into ``sums``, on the device; a window redone after an OOM starts them afresh. ``pace``
    is told when the boundary micro-batch's backward (the gradient all-reduce) begins.
    """
    if sums is not None:
        sums.start()
    grad_accum = engine.gradient_accumulation_steps()
    micro_batch = engine.train_micro_batch_size_per_gpu()
    manual_scale = needs_manual_loss_scale(engine)  # DeepSpeed 0.19.8 stage-0 fp16 gap
    total = torch.zeros((), device=engine.device)
    for micro in range(grad_accum):
        inputs = [t.to(engine.device, non_blocking=True) for t in batch(step, micro, micro_batch)]
        loss, named = split_output(engine(*inputs))  # the scalar loss (and the workload's scalars)
        if sums is not None and named:
            sums.add(named)
        if pace is not None and micro == grad_accum - 1:
            pace.at_collective()  # the rest of the step waits for every rank
        engine.backward(scaled_for_backward(engine, loss, manual_scale))  # also divides by grad_accum
        engine.step()  # only steps the optimizer at the accumulation boundary
        total += loss.detach().float()
    return total / grad_accum


def hold(training: Training, agree: Callable[[], None] | None) -> None:
    """Wait at this step boundary while the operator holds training; a stop ends the wait.

    Nothing is lost or redone: the engine keeps its state in memory. With several ranks
    every rank holds here, meeting in an agreement every HOLD_POLL_S (so a long pause never
    leaves a rank inside one collective long enough for its timeout).
    """
    link, step = training.link, int(training.engine.global_steps)
    link.event(RunPaused(step=step), f"training paused at step {step}")
    started = time.monotonic()
    while link.pause_requested.is_set() and not link.stop_requested.is_set():
        time.sleep(HOLD_POLL_S)
        collect_sealed(training)
        if agree is not None:
            agree()
    held_s = time.monotonic() - started
    if not link.stop_requested.is_set():
        message = f"training continues at step {step} after {held_s:.0f} s paused"
        link.event(RunContinued(step=step, paused_s=round(held_s, 1)), message)


def report_step(
    training: Training,
    loss: torch.Tensor,
    lr: float,
    scale: float | None,
    overflow: bool,
    step_time_s: float,
    metrics: dict[str, float] | None = None,
    data_wait_s: float | None = None,
) -> None:
    sample = training.telemetry.sample(
        loss=float(loss.item()),
        lr=float(lr),
        scale_during_step=scale,
        overflow=overflow,
        step_time_s=step_time_s,
        data_wait_s=data_wait_s,
        memory_figures=training.memory.figures(),
        metrics=metrics,
    )
    training.link.send(StepReport(sample=sample))


def maybe_checkpoint(training: Training) -> None:
    """Save when the cadence says (``checkpoint.every_steps``, fixed or auto, and/or minutes)."""
    since_s = time.monotonic() - training.last_saved_at
    step, cadence = int(training.engine.global_steps), training.cadence
    if training.run is not None and cadence.due(step, training.last_saved_step, since_s):
        save_checkpoint(training)


def save_checkpoint(training: Training, background: bool = True) -> None:
    """A durable save (see engine.checkpoints.store); a skipped or failed one is an alert
    event and the run goes on with its older checkpoints.

    With rank 0's sealer and ``background``, training waits only for the write (plus any
    wait for the previous seal); ``collect_sealed`` reports the save when its seal ends."""
    if training.run is None:
        return
    engine, config = training.engine, training.config
    waited_s = collect_sealed(training, wait=True)  # the next save clears staging dirs
    store = checkpoint.store_for(config, training.run)
    effective = training.directives.effective
    applied = [dict(effective)] if effective else []  # the manifest's "applied directives"
    sealer = training.sealer if background else None
    state = client_state(training)
    with training.chaos.saving():  # a full disk
        saved = checkpoint.save(engine, store, config, state, applied, training.ranks, sealer)
    training.last_saved_at = time.monotonic()
    stall_s = saved.seconds + waited_s  # "sealing": its seconds are the write's alone
    if saved.status in ("saved", "sealing"):
        training.last_saved_step = saved.step  # every rank: the cadence counts from here
        training.telemetry.checkpoint_stall_s = stall_s  # the next step report carries it
        if background:  # the cadence's saves, not the final one
            training.cadence.after_save(saved.step, stall_s, store if training.ranks.leader else None)
    if saved.status == "sealing":
        training.sealing_stall_s = stall_s
        return
    report_save(training.link, saved, stall_s)


def collect_sealed(training: Training, wait: bool = False) -> float:
    """Report the background seal's outcome once it ended (``wait``: block until it does).
    Returns the seconds spent waiting. A failed seal makes the final save happen again."""
    if training.sealer is None or not training.sealer.busy:
        return 0.0
    if wait:
        outcome, waited_s = training.sealer.wait()
    else:
        outcome, waited_s = training.sealer.poll(), 0.0
    if outcome is not None:
        if outcome.status != "saved":
            training.last_saved_step = -1  # rank 0 only; the final save's decision is agreed
        report_save(training.link, outcome, training.sealing_stall_s, background=True)
    return waited_s


def settle_sealing(training: Training) -> None:
    """On the way out of a failing run: finish the seal in flight; never raise over the
    error that is ending the run (the link may be what broke)."""
    try:
        collect_sealed(training, wait=True)
    except Exception:
        log.exception("reporting the last background checkpoint failed")
