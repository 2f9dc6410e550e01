"""What an applied directive did: the ``steps`` optimizer steps after it against as many before.

``EffectWatch`` keeps the newest steps' telemetry; when the trainer echoes a directive as
applied at step S it takes the steps up to S as the "before" window and waits for as many
after S. Figures per window: the loss slope (least squares, per step), mean tokens/s, fp16
overflows and the largest step peak of memory. Steps replayed after a trainer restart
replace the ones they repeat. Chaos injected while a directive is measured (from the step it
was injected after until its verdict) is named in the effect: an overflow a NaN injection
made is not the directive's. Pure and torch-free.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import dataclass, field

from engine.directive_effect import DirectiveEffect, EffectWindow
from engine.directives.slope import slope
from engine.domain import TelemetrySample

MAX_WAITING = 64  # applied directives measured at once; older ones are dropped unmeasured


@dataclass
class Waiting:
    applied_step: int
    before: list[TelemetrySample]
    after: list[TelemetrySample] = field(default_factory=list)


def summarize(window: list[TelemetrySample]) -> EffectWindow:
    """One side's figures (the window is non-empty, oldest first)."""
    peaks = [s.mem_step_peak or s.mem_peak for s in window if (s.mem_step_peak or s.mem_peak)]
    return EffectWindow(
        first_step=window[0].step,
        last_step=window[-1].step,
        loss_slope=slope([s.loss for s in window]),
        tokens_per_s=statistics.fmean(s.tokens_per_s for s in window),
        overflows=sum(1 for s in window if s.overflow),
        mem_peak=max(peaks) if peaks else None,
    )


MAX_CHAOS = 64  # chaos spans remembered; older ones are forgotten (their windows long closed)


@dataclass
class ChaosSpan:
    """Steps one chaos injection may have touched: from the step after its injection until
    its verdict (None: not yet)."""

    label: str
    """``c-1234abcd spike``: the chaos id and its kind."""
    first_step: int
    last_step: int | None = None


class EffectWatch:
    """The newest ``steps`` samples, the directives waiting for their after-window and the
    chaos injected lately."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.recent: deque[TelemetrySample] = deque(maxlen=steps)
        self.waiting: dict[str, Waiting] = {}
        self.chaos: dict[str, ChaosSpan] = {}

    def chaos_injected(self, chaos_id: str, kind: str, step: int) -> None:
        """Chaos ``chaos_id`` of ``kind`` was injected after optimizer step ``step``."""
        self.chaos[chaos_id] = ChaosSpan(f"{chaos_id} {kind}", step + 1)
        while len(self.chaos) > MAX_CHAOS:
            del self.chaos[next(iter(self.chaos))]

    def chaos_settled(self, chaos_id: str, step: int) -> None:
        """Its verdict came after step ``step``: it touches no later step."""
        span = self.chaos.get(chaos_id)
        if span is not None and span.last_step is None:
            span.last_step = max(step, span.first_step)

    def chaos_in_effect(self) -> list[str]:
        """Labels of the chaos injected and not yet settled (no verdict yet)."""
        return [span.label for span in self.chaos.values() if span.last_step is None]

    def _chaos_within(self, first: int, last: int) -> list[str]:
        """Labels of the chaos whose steps meet ``first..last``."""
        return [
            span.label
            for span in self.chaos.values()
            if span.first_step <= last and (span.last_step is None or span.last_step >= first)
        ]

    def applied(self, directive_id: str, step: int) -> None:
        """The trainer applied ``directive_id`` at the boundary after ``step``."""
        before = [s for s in self.recent if s.step <= step][-self.steps :]
        if not before:
            return  # nothing to compare with (the first step, or a store with no history)
        self.waiting.pop(directive_id, None)
        self.waiting[directive_id] = Waiting(step, before)
        while len(self.waiting) > MAX_WAITING:
            del self.waiting[next(iter(self.waiting))]

    def on_step(self, sample: TelemetrySample) -> list[tuple[str, DirectiveEffect]]:
        """Take one step; the directives whose after-window it completes, with their effect."""
        while self.recent and self.recent[-1].step >= sample.step:
            self.recent.pop()  # a replay after a restart: the newer run of these steps wins
        self.recent.append(sample)
        done: list[tuple[str, DirectiveEffect]] = []
        for directive_id, wait in list(self.waiting.items()):
            if sample.step <= wait.applied_step:
                continue
            wait.after = [s for s in wait.after if s.step < sample.step] + [sample]
            if len(wait.after) >= self.steps:
                del self.waiting[directive_id]
                before, after = summarize(wait.before), summarize(wait.after)
                effect = DirectiveEffect(
                    applied_step=wait.applied_step,
                    steps=self.steps,
                    before=before,
                    after=after,
                    chaos=self._chaos_within(before.first_step, after.last_step),
                )
                done.append((directive_id, effect))
        return done
