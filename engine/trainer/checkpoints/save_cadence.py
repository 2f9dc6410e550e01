"""``checkpoint.every_steps`` in the loop: a fixed interval, or the ``"auto"`` cadence.

With ``"auto"``, rank 0 feeds ``engine.checkpoints.cadence`` the step times and each
save's stall and decides; the interval is broadcast at every save (a collective the
ranks are in anyway), so every rank saves at the same step. Each new interval is a
``checkpoint_cadence`` event with the figures it came from. Each checkpoint carries the
smoothed figures (``client_state["cadence"]``), so a restarted trainer starts from the
interval the run had rather than from ``FIRST_INTERVAL_STEPS``.
"""

from __future__ import annotations

from engine.checkpoints.cadence import Cadence, CadenceBounds, CadenceDecision, interval_due
from engine.checkpoints.selection import save_due
from engine.checkpoints.store import CheckpointStore
from engine.config.run_config import CheckpointConfig
from engine.events import CheckpointCadence
from engine.trainer.link import Link
from engine.trainer.ranks.rank_group import RankGroup


class SaveCadence:
    """When the loop saves: ``due`` after each step, ``after_save`` after each save."""

    def __init__(
        self,
        config: CheckpointConfig,
        ranks: RankGroup,
        link: Link,
        step: int = 0,
        resumed: dict[str, float] | None = None,
    ) -> None:
        """``step``: where training starts (a resume's step); ``resumed``: the figures the
        resumed checkpoint carried (``figures``), so that a restart keeps the interval."""
        self.config, self.ranks, self.link = config, ranks, link
        self.cadence: Cadence | None = None
        self.interval = config.every_steps if isinstance(config.every_steps, int) else 0
        """Steps between saves (0: only when the run stops); ``auto``: the agreed one."""
        if config.every_steps == "auto":
            bounds = CadenceBounds(
                config.max_stall, config.min_interval_steps, config.max_interval_steps, config.keep
            )
            self.cadence = Cadence(bounds)
            self.cadence.resume(resumed or {})
            self.interval = int(ranks.broadcast(self.cadence.interval))  # rank 0's figures hold
            self._announce(self.cadence.decision, step)

    def figures(self) -> dict[str, float]:
        """What a checkpoint carries into the next trainer (``resumed``)."""
        return self.cadence.figures() if self.cadence is not None else {}

    def note_step(self, step_s: float) -> None:
        """One optimizer step took ``step_s`` seconds (rank 0's figure is the one used)."""
        if self.cadence is not None:
            self.cadence.note_step(step_s)

    def due(self, step: int, last_saved_step: int, seconds_since_save: float) -> bool:
        """Whether the step just completed should be saved (steps and/or wall clock); with
        ``every_minutes`` and several ranks, any rank's clock counts (every rank calls it)."""
        minutes = self.config.every_minutes
        if self.cadence is None:
            due = save_due(step, last_saved_step, seconds_since_save, self.interval, minutes)
        else:
            by_steps = interval_due(step, last_saved_step, self.interval)
            due = by_steps or save_due(step, last_saved_step, seconds_since_save, 0, minutes)
        if minutes and self.ranks.world > 1:
            due = bool(self.ranks.max_ints([due])[0])  # clocks differ: any rank's "due" counts
        return due

    def after_save(self, step: int, stall_s: float, store: CheckpointStore | None) -> None:
        """A save at ``step`` stalled training ``stall_s`` seconds: re-decide (rank 0) and
        agree on the interval (every rank calls this at the same save)."""
        if self.cadence is None:
            return
        decision = None
        if self.ranks.leader:
            size, room = store.room_for_checkpoints() if store is not None else (0, None)
            decision = self.cadence.note_save(stall_s, size, room)
            if decision is not None:
                self._announce(decision, step)
        self.interval = int(self.ranks.broadcast(self.cadence.interval))

    def _announce(self, decision: CadenceDecision, step: int) -> None:
        if not self.ranks.leader:
            return
        self.link.event(
            CheckpointCadence(
                step=step,
                interval=decision.interval,
                limit=decision.limit,
                max_stall=self.config.max_stall,
                step_s=_rounded(decision.step_s),
                stall_s=_rounded(decision.stall_s),
                share=_rounded(decision.share, 6),
                size_bytes=decision.size_bytes,
                room_bytes=decision.room_bytes,
            ),
            decision.describe(),
        )


def _rounded(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)
