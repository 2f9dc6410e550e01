"""The trainer's side of directives: apply admitted values at an optimizer-step boundary.

Defence in depth: the supervisor's policy already admitted these values, but the trainer
re-checks each against the run config's hard bounds (``PolicyConfig``) and refuses what
lies outside, whatever the socket says, unless it is the field's run default (the way back
an operator may take: ``engine.config.directive_defaults``). Where each value goes in DeepSpeed
(docs/deepspeed.md, Loss scale):

- ``lr_multiplier``: a factor on the configured schedule, never compounding. A LambdaLR's
  lambdas (ours, lr_schedule.py) are wrapped once with a factor read from ``self``; any
  other scheduler (a workload's, a deepspeed_config ``scheduler``) is put behind
  ``ScaledScheduler``, which steps it on its own lr and applies the factor after. Either
  way the param groups hold the lr the optimizer uses, which ``engine.get_lr()`` (the
  step's telemetry) reports.
- ``gradient_clip_norm``: ``optimizer.clip_grad`` (what DeepSpeed's optimizers read), and
  the engine's config value (what a plain torch optimizer's clipping reads).
- ``loss_scale_initial_power``: the current fp16 scale set to 2**power, in
  ``optimizer.loss_scale_config`` (stage 0) or ``optimizer.loss_scaler`` (ZeRO).
- ``micro_batch_size``: a request to the adaptive memory controller, which re-checks it
  against its memory model and applies it at this same boundary.

Applied values are kept in ``effective`` and saved in the checkpoint's client_state, so a
resume (which restores DeepSpeed's pickled clip and scaler) re-applies them, except the
one-shot ones (``ONE_SHOT_FIELDS``): the scaler state and the geometry the checkpoint
restored are where the loss-scale power and the micro-batch went since (the scaler's
backing off, an OOM's shrink), and setting them again would undo that.
"""

from __future__ import annotations

import logging
import math
import types
from collections import deque
from typing import Any

from torch.optim.lr_scheduler import LambdaLR

from engine.config.directive_defaults import run_defaults
from engine.config.run_config import RunConfig
from engine.domain import DIRECTIVE_FIELDS, ONE_SHOT_FIELDS
from engine.events import DirectiveApplied
from engine.trainer.lr_schedule import ScaledScheduler
from engine.wire.protocol import ApplyDirective

log = logging.getLogger(__name__)


class DirectiveApplier:
    """Applies ApplyDirective messages from ``inbox`` at each step boundary."""

    def __init__(self, config: RunConfig, engine: Any, memory: Any, link: Any) -> None:
        self.config = config
        self.engine = engine
        self.memory = memory  # AdaptiveMemory: request_micro_batch(m) -> Verdict
        self.link = link
        inbox = getattr(link, "directives", None)  # an empty deque is falsy: test for None
        self.inbox: deque[ApplyDirective] = inbox if inbox is not None else deque()
        self.bounds = config.policy.bounds()
        self.defaults = run_defaults(config)  # allowed beyond the bounds: the way back
        self.lr_multiplier = 1.0
        self.effective: dict[str, float | int] = {}
        """Field -> value in effect (what a checkpoint records and a resume re-applies)."""
        self._wrapped = False
        self._foreign: ScaledScheduler | None = None  # a scheduler we do not own, with the factor

    # ---------------------------------------------------------------- boundary

    def at_boundary(self, step: int) -> None:
        """Before optimizer step ``step`` (0-based): apply everything that arrived."""
        while self.inbox:
            message = self.inbox.popleft()
            self.apply(message, step)

    def apply(self, message: ApplyDirective, step: int) -> dict[str, Any]:
        """Apply one directive; echo what was applied and what was refused (and why)."""
        applied: dict[str, float | int] = {}
        refused: dict[str, str] = {}
        for name, value in message.values.items():
            why = self._refusal(name, value)
            if why is None:
                why = self._set(name, value)
            if why is None:
                applied[name] = value
            else:
                refused[name] = why
        self.effective.update(applied)
        echo = DirectiveApplied(
            directive_id=message.directive_id,
            decision_id=message.decision_id,
            step=step,
            applied=applied,
            refused=refused,
            resend=message.resend,
        )
        self.link.event(
            echo,
            f"directive {message.directive_id} at step {step}: applied {applied}"
            + (f", refused {refused}" if refused else ""),
            severity="info" if not refused else "warning",
        )
        return {"applied": applied, "refused": refused}

    def restore(self, saved: Any) -> None:
        """After a resume: the values a checkpoint recorded, re-applied (silently refused if
        they no longer fit the run's bounds); one-shot ones are left to the restored state."""
        if not isinstance(saved, dict):
            return
        for name, value in saved.items():
            if name in ONE_SHOT_FIELDS:
                continue
            if self._refusal(name, value) is None and self._set(name, value) is None:
                self.effective[name] = value

    # ------------------------------------------------------------- the checks

    def _refusal(self, name: str, value: Any) -> str | None:
        """Defence in depth: the run's hard bounds, whatever the supervisor said."""
        if name not in DIRECTIVE_FIELDS:
            return "not a directive field"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return f"{value!r} is not a finite number"
        low, high = self.bounds[name]  # type: ignore[index]
        if not low <= value <= high and value != self.defaults.get(name):  # type: ignore[call-overload]
            return f"{value:g} outside the hard limits [{low:g}, {high:g}] and not the run's default"
        if name in ("loss_scale_initial_power", "micro_batch_size") and value != int(value):
            return f"{value!r} is not a whole number"
        return None

    def _set(self, name: str, value: float | int) -> str | None:
        """Put ``value`` where DeepSpeed reads it; a reason if it cannot go anywhere."""
        if name == "lr_multiplier":
            return self._set_lr_multiplier(float(value))
        if name == "gradient_clip_norm":
            return self._set_clip(float(value))
        if name == "loss_scale_initial_power":
            return self._set_loss_scale(int(value))
        return self._request_micro_batch(int(value))

    # --------------------------------------------------------------- the knobs

    def _set_lr_multiplier(self, factor: float) -> str | None:
        self.lr_multiplier = factor
        scheduler: Any = getattr(self.engine, "lr_scheduler", None)
        # LambdaLR only: lr = base x fn(step) in closed form. MultiplicativeLR has lr_lambdas
        # too, but chains them (lr x fn), so a factor inside would compound every step.
        if isinstance(scheduler, LambdaLR):
            if not self._wrapped:
                scheduler.lr_lambdas = [self._scaled(fn) for fn in scheduler.lr_lambdas]
                self._wrapped = True
            # The scheduler already set this step's lr: recompute it with the new factor.
            groups = self.engine.optimizer.param_groups
            for group, base, fn in zip(groups, scheduler.base_lrs, scheduler.lr_lambdas, strict=True):
                group["lr"] = base * fn(scheduler.last_epoch)
            scheduler._last_lr = [group["lr"] for group in groups]  # the scheduler's view of it
            return None
        self._foreign_scheduler().set_factor(factor)
        return None

    def _scaled(self, fn: Any) -> Any:
        """``fn`` times the live factor. A plain function, so LambdaLR's state_dict skips it
        (it pickles only callable objects' __dict__) and checkpoints stay loadable."""

        def scaled(step: int) -> float:
            return float(fn(step)) * self.lr_multiplier

        assert isinstance(scaled, types.FunctionType)
        return scaled

    def _foreign_scheduler(self) -> ScaledScheduler:
        """The engine's scheduler behind a ScaledScheduler (installed once, on first use)."""
        if self._foreign is None:
            inner = getattr(self.engine, "lr_scheduler", None)
            self._foreign = ScaledScheduler(inner, self.engine.optimizer.param_groups)
            if inner is not None:
                self.engine.lr_scheduler = self._foreign  # DeepSpeed steps (and saves) it through us
        return self._foreign

    def _set_clip(self, norm: float) -> str | None:
        optimizer = self.engine.optimizer
        placed = False
        if hasattr(optimizer, "clip_grad"):
            optimizer.clip_grad = norm
            placed = True
        ds_config = getattr(self.engine, "_config", None)
        if ds_config is not None and hasattr(ds_config, "gradient_clipping"):
            ds_config.gradient_clipping = norm
            placed = True
        return None if placed else "this optimizer has no clip setting"

    def _set_loss_scale(self, power: int) -> str | None:
        if not self.engine.fp16_enabled():
            return f"{self.config.train.precision} has no loss scale"
        optimizer = self.engine.optimizer
        for holder in (
            getattr(optimizer, "loss_scale_config", None),
            getattr(optimizer, "loss_scaler", None),
        ):
            if holder is not None and hasattr(holder, "cur_scale"):
                holder.cur_scale = float(2**power)
                return None
        return "no loss scaler found on the optimizer"

    def _request_micro_batch(self, micro_batch: int) -> str | None:
        if self.memory is None:
            return "no memory controller to ask"
        verdict = self.memory.request_micro_batch(micro_batch)
        return None if verdict.accepted else verdict.reason
