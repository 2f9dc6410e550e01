"""What happened to each save and each resume's checkpoint."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from engine.events.payload import Origin, Payload


class CheckpointSaved(Payload):
    event_type = "checkpoint_saved"
    origin = "trainer"
    step: int
    tag: str
    seconds: float | None
    """Training stood still this long for the save (s); None: not measured (reconciled)."""
    write_s: float | None
    """DeepSpeed's write of the files (s); None: not measured (reconciled)."""
    seal_s: float | None
    """fsync, hashes, manifest, rename, verify, prune (s); None: not measured (reconciled)."""
    background: bool
    """Sealed on the background thread while training went on."""
    size_bytes: int
    pruned: list[str] = Field(default_factory=list)
    """Tags deleted after this one verified."""
    reconciled: bool = False
    """Recorded by the supervisor before a trainer launch, not by the trainer: the tag was
    sealed on disk (its manifest and sizes check) but its trainer died before announcing it."""


class CheckpointCadence(Payload):
    """``checkpoint.every_steps = "auto"`` chose the interval between saves, and why."""

    event_type = "checkpoint_cadence"
    origin = "trainer"
    step: int
    """The step at which the choice was made (the save that measured it)."""
    interval: int
    """Optimizer steps between saves from now on."""
    limit: str
    """What set it: ``first`` (no save measured yet), ``stall_budget``, ``min_interval``,
    ``max_interval`` or ``disk_room`` (see engine.checkpoints.cadence)."""
    max_stall: float
    """The budget: largest share of the run's time stalled for saves."""
    step_s: float | None = None
    """Smoothed step time (s)."""
    stall_s: float | None = None
    """Smoothed training stall of one save (s)."""
    share: float | None = None
    """Expected stall share at this interval."""
    size_bytes: int = 0
    room_bytes: int | None = None
    """Free disk plus the checkpoints already there (bytes)."""


class CheckpointNotSaved(Payload):
    """A save that did not happen; every older checkpoint is kept."""

    origin: ClassVar[Origin] = "trainer"
    severity = "critical"
    step: int
    tag: str
    reason: str
    free_bytes: int | None = None
    needed_bytes: int | None = None


class CheckpointSkipped(CheckpointNotSaved):
    """Not attempted: too little free disk."""

    event_type = "checkpoint_skipped"


class CheckpointFailed(CheckpointNotSaved):
    """Attempted and failed (a full disk mid-write, an I/O error)."""

    event_type = "checkpoint_failed"


class FinalSaveMissed(CheckpointNotSaved):
    """A stop whose trainer did not end by itself within the grace: it was killed before any
    final save (the supervisor's word, since the trainer could not say it)."""

    event_type = "final_save_missed"
    origin = "supervisor"


class CheckpointRejected(Payload):
    """A checkpoint that does not verify (or was half-written), set aside on resume."""

    event_type = "checkpoint_rejected"
    origin = "trainer"
    severity = "warning"
    tag: str
    problem: str
    step: int | None = None
    quarantined: str | None = None
    """Its name in ``checkpoints/quarantine/`` once moved there (a staging dir a crash left, a
    tag that failed verification); None: left in place (a resume refused)."""


class CheckpointLoaded(Payload):
    event_type = "checkpoint_loaded"
    origin = "trainer"
    step: int
    tag: str
    skipped: list[str] = Field(default_factory=list)
    """Newer tags that did not verify, with why."""
    converted_from_world: int | None = None
    """The tag was written by this many ranks, another number than this attempt's: it was
    loaded through DeepSpeed's universal checkpoint conversion."""


class FreshStart(Payload):
    """No checkpoint to resume from: training starts over (asked for, or none existed)."""

    event_type = "fresh_start"
    origin = "trainer"
    severity = "warning"
