"""``Training``: everything the loop touches, built once by ``loop.train`` (or by a bench),
its dependent parts by ``training_parts.equip``."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from engine.checkpoints.sealer import CheckpointSealer
from engine.config.run_config import RunConfig
from engine.memory.model_description import ModelDescription
from engine.run.directory import RunDir
from engine.trainer.chaos.injections import ChaosInjections
from engine.trainer.checkpoints.save_cadence import SaveCadence
from engine.trainer.directive_applier import DirectiveApplier
from engine.trainer.link import Link
from engine.trainer.memory.adaptive_memory import AdaptiveMemory
from engine.trainer.ranks.rank_group import RankGroup
from engine.trainer.telemetry.evaluation import Evaluator
from engine.trainer.telemetry.rank_memory import RankPace
from engine.trainer.telemetry.step_metrics import WorkloadMetrics
from engine.trainer.telemetry.step_telemetry import StepTelemetry
from engine.trainer.workloads.built_model import describe_built
from engine.trainer.workloads.workload import Workload


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
    last_saved_at: float = field(default_factory=time.monotonic)
    """time.monotonic() of the last save (or the start): the wall-clock cadence counts from it."""
    resumed_directives: dict[str, Any] = field(default_factory=dict)
    """Directive values the resumed checkpoint recorded, re-applied before the first step."""
    ranks: RankGroup = field(default_factory=RankGroup)
    """This process's rank in the trainer's group (one rank unless torchrun started several)."""
    pace: RankPace = field(default_factory=RankPace)
    """This rank's own time per step, sent with its memory in the rank reports."""
    sealer: CheckpointSealer | None = None
    """Rank 0's background sealer (``checkpoint.background``); None seals in line."""
    sealing_stall_s: float = 0.0
    """What the save now being sealed stalled training (s), reported when the seal ends."""
    data_offset: int = 0
    """Step index + this = the data position a step draws (``engine.rollback``)."""
    description: ModelDescription | None = None
    """The model built (``described`` builds it when a bench left it out)."""

    # The parts below need the ones above: ``training_parts.equip`` builds them all at once.
    memory: AdaptiveMemory = field(init=False)
    """Budget, controller and OOM recovery."""
    directives: DirectiveApplier = field(init=False)
    """Applies admitted directives at step boundaries."""
    chaos: ChaosInjections = field(init=False)
    """Injections the supervisor asked for, in force at step boundaries."""
    metrics: WorkloadMetrics = field(init=False)
    """The workload's own scalars: the run's metric screen and its warnings."""
    evaluator: Evaluator = field(init=False)
    """Evals every ``eval.every_steps`` steps."""
    cadence: SaveCadence = field(init=False)
    """When to save (``checkpoint.every_steps``, fixed or auto)."""

    def described(self) -> ModelDescription:
        """The description of the model trained: MFU, memory prior, plan and start report read it."""
        if self.description is None:
            self.description = describe_built(self.workload, self.config)
        return self.description
