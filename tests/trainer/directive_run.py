"""Run the real training loop in this process with directives injected at a step boundary.

``python directive_run.py RUN_DIR STEPS inject|no`` prints one JSON object: the lr of every
reported step, the loss scale each step's backward used (``scales``, keyed like ``lrs`` by
the reported step number), the directive_applied events, and where DeepSpeed keeps clip and
scale at the last save. A directive (and a hostile one) is injected when step 3 is
reported, on the first run only. The ZeRO stage, precision and schedule come from run.json.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from engine.run.directory import RunDir
from engine.trainer import loop
from engine.trainer.link import NullLink
from engine.trainer.telemetry.step_telemetry import loss_scale
from engine.wire.protocol import ApplyDirective, StepReport, TrainerEvent

INJECT_AT = 3


class InjectingLink(NullLink):
    def __init__(self, inject: bool) -> None:
        super().__init__(record=True)
        self.inject = inject
        self.lrs: dict[int, float] = {}
        self.events: list[dict[str, Any]] = []

    def send(self, message: BaseModel) -> None:
        if isinstance(message, StepReport):
            self.lrs[message.sample.step] = message.sample.lr
            if self.inject and message.sample.step == INJECT_AT:
                good = {"lr_multiplier": 0.5, "gradient_clip_norm": 0.5, "loss_scale_initial_power": 8}
                self.directives.append(ApplyDirective(directive_id="d-good", decision_id="x-1", values=good))
                bad = {"lr_multiplier": 5.0, "micro_batch_size": 3}
                self.directives.append(ApplyDirective(directive_id="d-bad", decision_id="x-2", values=bad))
        elif isinstance(message, TrainerEvent) and message.type == "directive_applied":
            self.events.append(message.data)


def main() -> None:
    run = RunDir(Path(sys.argv[1]))
    config = run.read_config()
    config = config.model_copy(update={"steps": int(sys.argv[2])})
    link = InjectingLink(inject=sys.argv[3] == "inject")
    captured: dict[str, Any] = {}
    original = loop.save_checkpoint

    def capture(training: loop.Training, background: bool = True) -> None:
        optimizer = training.engine.optimizer
        holder = getattr(optimizer, "loss_scale_config", None) or getattr(optimizer, "loss_scaler", None)
        captured.update(
            clip=getattr(optimizer, "clip_grad", None),
            effective=dict(training.directives.effective) if training.directives else {},
            scale=getattr(holder, "cur_scale", None),
        )
        original(training, background)

    scales: dict[int, float | None] = {}
    original_step = loop.train_step

    def scaled_step(engine: Any, batch: Any, step: int, **rest: Any) -> Any:
        scales[step + 1] = loss_scale(engine)  # 0-based index -> the step number it reports as
        return original_step(engine, batch, step, **rest)

    loop.save_checkpoint = capture  # type: ignore[assignment]
    loop.train_step = scaled_step  # type: ignore[assignment]
    loop.train(config, run, 1, link)
    print(json.dumps({"lrs": link.lrs, "scales": scales, "events": link.events, **captured}))


if __name__ == "__main__":
    main()
