"""Every event type a run records, and the typed payload of each (``engine.events.payload``
says how payloads are written and read). One module per family; every name is here, so
``from engine.events import CheckpointSaved`` is all a writer or reader needs, and importing
the package registers every type in ``PAYLOADS``. Torch-free.
"""

from __future__ import annotations

from engine.events.alerts import (
    HEARTBEAT_RULE,
    INSTANT_RULES,
    METRICS_PORT_RULE,
    PLANNER_RULE,
    STORAGE_RULE,
    SUPERVISOR_RESTARTED,
    TASK_FAILED_RULE,
    AlertRaised,
    DoctorReported,
)
from engine.events.chaos import ChaosApplied, ChaosInjected, ChaosRecovered, LegacyChaos
from engine.events.checkpoints import (
    CheckpointCadence,
    CheckpointFailed,
    CheckpointLoaded,
    CheckpointNotSaved,
    CheckpointRejected,
    CheckpointSaved,
    CheckpointSkipped,
    FinalSaveMissed,
    FreshStart,
)
from engine.events.directives import (
    DirectiveApplied,
    DirectiveDecided,
    DirectiveEffectMeasured,
    DirectiveProposed,
    DirectiveRecord,
    DirectivesCarried,
    DirectivesRateLimited,
    PlannerDisabled,
    PlannerRestarted,
    RolledBack,
)
from engine.events.evaluation import EvalCompleted, EvalSkipped
from engine.events.memory import LossScaleFloor, MemoryAdapted, MemoryExhausted, MemoryLevel, PlannedMemory
from engine.events.metrics import MetricWarning
from engine.events.payload import PAYLOADS, Origin, Payload, Recorder, payload_of
from engine.events.rendezvous import NodesJoined, RendezvousTimedOut, RendezvousWait
from engine.events.run import (
    ContinueRequested,
    PauseKept,
    PauseRequested,
    ReportsRecovered,
    RestartsExhausted,
    RunContinued,
    RunEnded,
    RunPaused,
    RunStarted,
    StacksCollected,
    StateChanged,
    StopRequested,
    TrainerError,
    TrainerExited,
    TrainerFinished,
    TrainerHung,
    TrainerLaunched,
    TrainerLaunchFailed,
    TrainerRestarted,
    TrainerResumed,
    TrainerStarted,
)
from engine.events.standby import StandbyLost, StandbyReady
from engine.events.startup import PhaseName, StartupPhase, nodes_met

SUPERVISOR_EVENTS: frozenset[str] = frozenset(t for t, m in PAYLOADS.items() if m.origin == "supervisor")
"""Types only the supervisor records; a trainer that sends one is refused."""

__all__ = [
    "HEARTBEAT_RULE",
    "INSTANT_RULES",
    "PAYLOADS",
    "PLANNER_RULE",
    "STORAGE_RULE",
    "SUPERVISOR_EVENTS",
    "SUPERVISOR_RESTARTED",
    "METRICS_PORT_RULE",
    "TASK_FAILED_RULE",
    "AlertRaised",
    "ChaosApplied",
    "ChaosInjected",
    "ChaosRecovered",
    "CheckpointCadence",
    "CheckpointFailed",
    "CheckpointLoaded",
    "CheckpointNotSaved",
    "CheckpointRejected",
    "CheckpointSaved",
    "CheckpointSkipped",
    "ContinueRequested",
    "DirectiveApplied",
    "DirectiveDecided",
    "DirectiveEffectMeasured",
    "DirectiveProposed",
    "DirectiveRecord",
    "DirectivesCarried",
    "RolledBack",
    "DirectivesRateLimited",
    "DoctorReported",
    "EvalCompleted",
    "EvalSkipped",
    "FinalSaveMissed",
    "FreshStart",
    "LegacyChaos",
    "LossScaleFloor",
    "MemoryAdapted",
    "MemoryExhausted",
    "MemoryLevel",
    "MetricWarning",
    "NodesJoined",
    "Origin",
    "PauseKept",
    "PhaseName",
    "PauseRequested",
    "Payload",
    "PlannerDisabled",
    "PlannerRestarted",
    "Recorder",
    "RendezvousTimedOut",
    "RendezvousWait",
    "ReportsRecovered",
    "RestartsExhausted",
    "RunContinued",
    "RunEnded",
    "RunPaused",
    "RunStarted",
    "StandbyLost",
    "StandbyReady",
    "StartupPhase",
    "StateChanged",
    "StopRequested",
    "TrainerError",
    "TrainerExited",
    "TrainerFinished",
    "StacksCollected",
    "TrainerHung",
    "TrainerLaunched",
    "TrainerLaunchFailed",
    "TrainerRestarted",
    "TrainerResumed",
    "TrainerStarted",
    "PlannedMemory",
    "nodes_met",
    "payload_of",
]
