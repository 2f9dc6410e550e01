"""What an applied directive did, summed up on both sides of it: the record that the
``directive_effect`` event carries, the console's directive detail shows and ``memtui
directives`` lists (``engine.directives.effect`` measures it). Torch-free.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class EffectWindow(BaseModel):
    """Steps on one side of an applied directive, summed up (one rank's memory, bytes)."""

    model_config = ConfigDict(extra="forbid", frozen=True, ser_json_inf_nan="constants")

    first_step: int
    last_step: int
    loss_slope: float | None = None
    """Least-squares loss change per optimizer step (nats/token/step); None: under 2 finite losses."""
    tokens_per_s: float = 0.0
    """Mean over the window's steps, all ranks."""
    overflows: int = 0
    """fp16 overflows (skipped steps) in the window."""
    mem_peak: int | None = None
    """Largest step peak in the window, bytes; None where the trainer reported none."""


class DirectiveEffect(BaseModel):
    """What an applied directive did: ``steps`` optimizer steps after it against as many before."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    applied_step: int
    steps: int
    before: EffectWindow
    after: EffectWindow
    chaos: list[str] = []
    """Chaos injected during the two windows, ``c-1234abcd spike`` each: what it did to the
    figures (overflows, the loss, tokens/s) is not the directive's doing."""

    def describe(self) -> str:
        """``over 100 steps before -> after step 450: loss slope -2.10e-04 -> -5.00e-05/step,
        tokens/s 5,210 -> 5,380, overflows 0 -> 0, peak 310.0 MiB -> 312.0 MiB``."""
        b, a = self.before, self.after

        def slope(value: float | None) -> str:
            return "-" if value is None else f"{value:+.2e}"

        def peak(value: int | None) -> str:
            return "-" if value is None else f"{value / (1 << 20):,.1f} MiB"

        confounded = f"; chaos injected meanwhile, not the directive's doing: {', '.join(self.chaos)}"
        return (
            f"over {self.steps} steps before -> after step {self.applied_step}: "
            f"loss slope {slope(b.loss_slope)} -> {slope(a.loss_slope)}/step, "
            f"tokens/s {b.tokens_per_s:,.0f} -> {a.tokens_per_s:,.0f}, "
            f"overflows {b.overflows} -> {a.overflows}, peak {peak(b.mem_peak)} -> {peak(a.mem_peak)}"
            + (confounded if self.chaos else "")
        )
