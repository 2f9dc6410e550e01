"""``ballast`` and ``release`` plan the ``Ballast`` schedule (held from this step), ``oom``
adds an injection to the ``OomInjector`` (the next step's first micro-batch; adaptive memory
recovers it as any OOM): the code their start-time environment variables use."""

from __future__ import annotations

from engine.chaos.kinds.memory import Ballast, Oom, Release
from engine.trainer.chaos.performer import TrainerPerformer
from engine.trainer.memory.oom_injection import Injection
from engine.trainer.memory.oom_recovery import is_oom


class BallastPerformer(TrainerPerformer[Ballast]):
    model = Ballast

    def start(self, request: Ballast, step: int, chaos_id: str) -> str:
        """Ballast planned and allocated now, so that a size the host cannot give is said
        (and none held) rather than ending the trainer at the next boundary."""
        ballast = self.parts.memory.ballast
        ballast.plan(step, request.bytes, request.steps)
        try:
            ballast.at_step(step)
        except Exception as err:
            if not is_oom(err):
                raise
            ballast.plan(step, 0)
            ballast.at_step(step)
            return f"{request.bytes} bytes of ballast could not be allocated ({err}); none held"
        held = f"for {request.steps} steps" if request.steps else "until released"
        return f"{request.bytes} bytes of ballast held {held}"


class ReleasePerformer(TrainerPerformer[Release]):
    model = Release

    def start(self, request: Release, step: int, chaos_id: str) -> str:
        had = self.parts.memory.ballast.held
        self.parts.memory.ballast.plan(step, 0)
        return f"ballast released ({had} bytes held)"


class OomPerformer(TrainerPerformer[Oom]):
    model = Oom

    def start(self, request: Oom, step: int, chaos_id: str) -> str:
        memory = self.parts.memory
        memory.injector.add(Injection(step, 0, request.phase), memory.module)
        memory.injector.position = (step, 0, int(self.parts.engine.train_micro_batch_size_per_gpu()))
        return f"out of memory in the {request.phase} of this step's first micro-batch"
