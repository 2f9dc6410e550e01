"""The parts of ``Training`` that need the others to exist (adaptive memory, the directive
applier, chaos injections, the workload's metric screen, the evaluator, the save cadence),
built once by ``equip`` for the trainer and the benches alike, so the loop reads them
without asking whether each one is there."""

from __future__ import annotations

from collections.abc import Mapping

from engine.trainer.chaos.injections import ChaosInjections
from engine.trainer.checkpoints.save_cadence import SaveCadence
from engine.trainer.directive_applier import DirectiveApplier
from engine.trainer.memory.adaptive_memory import AdaptiveMemory
from engine.trainer.memory.oom_forensics import OomForensics
from engine.trainer.telemetry.evaluation import Evaluator
from engine.trainer.telemetry.step_metrics import WorkloadMetrics
from engine.trainer.training import Training


def equip(training: Training, cadence_figures: Mapping[str, float] | None = None) -> Training:
    """``training`` with all its parts, in the order they need each other; ``cadence_figures``:
    what the resumed checkpoint carried for the save cadence (``SaveCadence.figures``)."""
    config, ranks, link = training.config, training.ranks, training.link
    training.memory = attach_memory(training)
    training.directives = attach_directives(training)
    training.chaos = ChaosInjections(training.engine, training.memory, link, config.train.precision)
    training.metrics = WorkloadMetrics(link, ranks)
    training.evaluator = attach_evaluator(training, training.metrics)
    start = int(training.engine.global_steps)
    training.cadence = SaveCadence(config.checkpoint, ranks, link, start, dict(cadence_figures or {}))
    return training


def attach_memory(training: Training) -> AdaptiveMemory:
    """Adaptive memory on the telemetry's probe (budget, controller, OOM recovery)."""
    memory = AdaptiveMemory(
        training.config,
        training.engine,
        training.workload.model,
        training.telemetry.probe,
        training.link,
        geometry_file=training.run.geometry_file if training.run is not None else None,
        ranks=training.ranks,
        description=training.described(),
        lengths=training.telemetry.lengths,
    )
    if training.run is not None:  # what each OOM leaves in RUN_DIR/oom/ (a bench keeps none)
        run_facts = (training.config, training.run.path, training.telemetry.attempt)
        memory.forensics = OomForensics.for_run(*run_facts, memory, training.described())
    return memory


def attach_evaluator(training: Training, metrics: WorkloadMetrics) -> Evaluator:
    """Evals on the workload's held-out batches at the configured micro-batch; their
    scalars pass the run's one metric screen (one limit, one warning event per drop)."""
    return Evaluator(
        training.config.eval,
        training.config.train.micro_batch,
        training.engine,
        training.workload.eval_batch,
        training.link,
        training.ranks,
        training.telemetry,
        metrics.screen,
    )


def attach_directives(training: Training) -> DirectiveApplier:
    """The directive applier on the link's inbox, with the resumed checkpoint's values."""
    applier = DirectiveApplier(training.config, training.engine, training.memory, training.link)
    applier.restore(training.resumed_directives)
    return applier
