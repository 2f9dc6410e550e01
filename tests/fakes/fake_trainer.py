"""A torch-free stand-in for ``python -m engine.trainer`` that speaks the real protocol.

    python tests/fakes/fake_trainer.py RUN_DIR --attempt N
    python tests/fakes/fake_trainer.py --standby RUN_DIR   (a spare: waits for its orders on stdin)

Connects to RUN_DIR/engine.sock as role "trainer", sends trainer_started, then one
StepReport per step at FAKE_TRAINER_RATE_HZ until FAKE_TRAINER_STEPS, then
trainer_finished {"reason": "completed"} and exit 0. Each step carries one workload
metric, ``accuracy`` (``fake_accuracy``). A TrainerCommand stop or SIGTERM
ends it early with trainer_finished {"reason": "stopped"}, exit 0. An ApplyDirective is
echoed as the real trainer does: a directive_applied event with every value applied.
A TrainerCommand pause holds it at the next step (run_paused) until resume (run_continued).
The supervisor's socket closing (it died) stops it at the next step, as the real trainer.

Environment (all optional):
  FAKE_TRAINER_RATE_HZ     steps per second (default 50)
  FAKE_TRAINER_STEPS       steps to run (default 1000)
  FAKE_TRAINER_EXIT_CODE   after the steps, send trainer_error and exit with this code
                           instead of completing (default 0 = complete)
  FAKE_TRAINER_IGNORE_STOP "1": ignore stop commands and SIGTERM (tests SIGKILL escalation)
  FAKE_TRAINER_NO_CONNECT  "1": never connect; just run until SIGTERM (exit 0) or the steps' time
  FAKE_TRAINER_NAN_AT      step whose loss is NaN (default none)
  FAKE_TRAINER_EVENT_EVERY send a "fake.tick" event every N steps (default 0 = never)
  FAKE_TRAINER_EVAL_EVERY  an eval (``eval_completed``, loss a little above the step's, one
                           ``accuracy`` metric) after every N steps, its seconds on the next
                           step's ``eval_s``, as the real trainer's (default 0 = never)
  FAKE_TRAINER_PHASES      start-up phases to say before the first step, comma-separated
                           (e.g. "importing,building_op,initialising"; default none)
  FAKE_TRAINER_GATE        a path: after its phases, the first step waits until it exists
  FAKE_TRAINER_STUCK_AT    a step that waits, as a hung collective does (the process runs and
                           answers signals; no step comes), until FAKE_TRAINER_STUCK_GATE exists
  FAKE_TRAINER_ADVANCE     attempt N starts at step (N - 1) x this + 1 (default 0: every
                           attempt from step 1): progress that no checkpoint records

An ``InjectChaos`` is applied at the next step boundary: ``chaos_applied`` for it, and
``nan_loss`` / ``overflow`` make that many steps' loss NaN (overflow flagged); ``oom`` is
answered as the real trainer answers one (``memory_adapted`` kind ``oom``, the micro-batch
halved from then on); the other kinds change nothing else here.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import faulthandler
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from engine.domain import STACK_DUMP_SIGNAL, TelemetrySample
from engine.events import (
    ChaosApplied,
    DirectiveApplied,
    EvalCompleted,
    MemoryAdapted,
    Payload,
    RunContinued,
    RunPaused,
    StartupPhase,
    TrainerError,
    TrainerFinished,
    TrainerStarted,
)
from engine.run.stack_files import open_live_stack_file
from engine.trainer.standby import await_orders, is_standby
from engine.wire.protocol import (
    PROTOCOL_VERSION,
    STREAM_LIMIT,
    ApplyDirective,
    Hello,
    InjectChaos,
    ProtocolError,
    StepReport,
    TrainerCommand,
    TrainerEvent,
    decode_server,
    encode,
    read_line,
)

NO_CONNECT_READY = "fake trainer: not connecting; SIGTERM ends me"
"""Printed (to the trainer log) once a FAKE_TRAINER_NO_CONNECT trainer handles SIGTERM."""


def as_message(payload: Payload, message: str) -> TrainerEvent:
    """A typed event as the real trainer's link sends it."""
    return TrainerEvent(
        type=payload.event_type, message=message, severity=payload.severity, data=payload.data()
    )


def started(attempt: int) -> TrainerStarted:
    """What the real trainer says when it starts, with the tiny preset's geometry."""
    return TrainerStarted(
        attempt=attempt,
        pid=os.getpid(),
        device="cpu",
        world_size=1,
        params=0,
        precision="fp16",
        zero_stage=0,
        micro_batch=8,
        grad_accum=1,
    )


EVAL_SECONDS = 0.01
"""What each fake eval says it held training (s)."""


def evaluated(step: int, train_loss: float) -> EvalCompleted:
    """An eval after ``step``: the held-out loss a little above the training loss."""
    accuracy = min(0.99, step / 1000)
    return EvalCompleted(
        step=step, loss=train_loss + 0.2, batches=8, seconds=EVAL_SECONDS, metrics={"accuracy": accuracy}
    )


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(name, default))


def sample(step: int, attempt: int, nan_at: int | None, micro_batch: int = 8) -> TelemetrySample:
    tokens_per_step = micro_batch * 128  # micro_batch x seq_len of the tiny preset
    loss = float("nan") if step == nan_at else 5.5 * math.exp(-step / 200) + 0.5
    return TelemetrySample(
        step=step,
        ts=time.time(),
        attempt=attempt,
        samples=8 * step,
        tokens=tokens_per_step * step,
        loss=loss,
        lr=3e-3,
        grad_norm=1.0,
        loss_scale=4096.0,
        step_time_s=0.02,
        tokens_per_s=tokens_per_step / 0.02,
        mem_allocated=100 << 20,
        mem_reserved=120 << 20,
        mem_peak=110 << 20,
        mem_capacity=1 << 30,
        micro_batch=micro_batch,
        grad_accum=8 // micro_batch,
        metrics={"accuracy": fake_accuracy(step)},
    )


def fake_accuracy(step: int) -> float:
    """The workload metric every step reports (a fraction rising from 0.3 towards 1), as a
    workload's forward returning ``(loss, {"accuracy": ...})`` makes the real trainer report."""
    return round(1.0 - 0.7 * math.exp(-step / 150), 4)


class FakeTrainer:
    def __init__(self, run_dir: Path, attempt: int) -> None:
        self.run_dir = run_dir
        self.attempt = attempt
        self.rate_hz = _env_float("FAKE_TRAINER_RATE_HZ", 50.0)
        self.steps = int(_env_float("FAKE_TRAINER_STEPS", 1000))
        self.exit_code = int(_env_float("FAKE_TRAINER_EXIT_CODE", 0))
        self.ignore_stop = os.environ.get("FAKE_TRAINER_IGNORE_STOP") == "1"
        self.no_connect = os.environ.get("FAKE_TRAINER_NO_CONNECT") == "1"
        nan_at = os.environ.get("FAKE_TRAINER_NAN_AT")
        self.nan_at = int(nan_at) if nan_at else None
        self.event_every = int(_env_float("FAKE_TRAINER_EVENT_EVERY", 0))
        self.eval_every = int(_env_float("FAKE_TRAINER_EVAL_EVERY", 0))
        self.stuck_at = int(_env_float("FAKE_TRAINER_STUCK_AT", 0))
        self.first_step = 1 + (attempt - 1) * int(_env_float("FAKE_TRAINER_ADVANCE", 0))
        self.stop = asyncio.Event()
        self.running = asyncio.Event()  # cleared while paused
        self.running.set()
        self.step = 0  # the last step reported
        self.writer: asyncio.StreamWriter | None = None
        self.chaos: list[InjectChaos] = []  # injected, applied at the next step boundary
        self.bad_steps: tuple[int, bool] = (0, False)  # (last step with a NaN loss, overflow)
        self.micro_batch = 8  # halved by an oom chaos, as the real trainer's recovery does

    def request_stop(self, why: str) -> None:
        print(f"fake trainer: stop ({why}){' ignored' if self.ignore_stop else ''}", flush=True)
        if not self.ignore_stop:
            self.stop.set()

    async def until_gate(self, variable: str) -> None:
        """Wait until the file the environment variable names exists (or a stop); no variable:
        no wait (FAKE_TRAINER_GATE before the first step, FAKE_TRAINER_STUCK_GATE when stuck)."""
        gate = os.environ.get(variable)
        while gate and not os.path.exists(gate) and not self.stop.is_set():
            await asyncio.sleep(0.02)  # polling a condition the test sets, not a wait for time

    async def run(self) -> int:
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, self.request_stop, "SIGTERM")
        if self.no_connect:
            print(NO_CONNECT_READY, flush=True)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), self.steps / self.rate_hz)
            return 0
        reader, writer = await asyncio.open_unix_connection(
            str(self.run_dir / "engine.sock"), limit=STREAM_LIMIT
        )
        writer.write(encode(Hello(protocol=PROTOCOL_VERSION, role="trainer", client="fake trainer")))
        self.writer = writer
        listener = asyncio.create_task(self.listen(reader))
        code = await self.train(writer)
        await writer.drain()
        writer.close()
        listener.cancel()
        return code

    async def listen(self, reader: asyncio.StreamReader) -> None:
        while (line := await read_line(reader)) is not None:
            try:
                message = decode_server(line)
            except ProtocolError as err:
                print(f"fake trainer: bad line from supervisor: {err}", flush=True)
                continue
            if isinstance(message, TrainerCommand) and message.command == "stop":
                self.request_stop(f"command: {message.reason}")
            elif isinstance(message, TrainerCommand):
                (self.running.clear if message.command == "pause" else self.running.set)()
            elif isinstance(message, InjectChaos):
                self.chaos.append(message)
            elif isinstance(message, ApplyDirective) and self.writer is not None:
                self.echo(message, self.writer)
            else:
                print(f"fake trainer: got {message.kind}", flush=True)
        self.request_stop("supervisor gone")  # as the real trainer: stop at the next step

    def echo(self, message: ApplyDirective, writer: asyncio.StreamWriter) -> None:
        """Applied at the next step boundary, as the real trainer's DirectiveApplier says."""
        applied: dict[str, float | int] = dict(message.values)
        echo = DirectiveApplied(
            directive_id=message.directive_id,
            decision_id=message.decision_id,
            step=self.step,
            applied=applied,
            resend=message.resend,
        )
        text = f"directive {message.directive_id} at step {self.step}: applied {applied}"
        writer.write(encode(as_message(echo, text)))

    def apply_chaos(self, event: Any, step: int) -> None:
        for message in self.chaos:
            request = message.request
            if request.kind in ("nan_loss", "overflow"):
                self.bad_steps = (step + request.steps - 1, request.kind == "overflow")  # type: ignore[union-attr]
            if request.kind == "oom" and self.micro_batch > 1:
                self.out_of_memory(event, step)
            applied = ChaosApplied(chaos_id=message.chaos_id, kind=request.kind, step=step)
            event(applied, f"chaos {request.kind} applied at step {step}")
        self.chaos.clear()

    def out_of_memory(self, event: Any, step: int) -> None:
        """The real trainer's answer to an OOM: the step redone at half the micro-batch."""
        half = self.micro_batch // 2
        adapted = MemoryAdapted(
            kind="oom",
            reason="chaos: out of memory",
            step=step,
            from_micro_batch=self.micro_batch,
            to_micro_batch=half,
            from_grad_accum=8 // self.micro_batch,
            to_grad_accum=8 // half,
        )
        event(adapted, f"OOM at micro-batch {self.micro_batch}: step {step} redone at {half}")
        self.micro_batch = half

    async def hold(self, event: Any, step: int) -> None:
        event(RunPaused(step=step), f"training paused at step {step}")
        stopped = asyncio.ensure_future(self.stop.wait())
        resumed = asyncio.ensure_future(self.running.wait())
        await asyncio.wait([stopped, resumed], return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        resumed.cancel()
        if not self.stop.is_set():
            event(RunContinued(step=step, paused_s=0.0), f"training continues at step {step}")

    async def start_up(self, event: Any) -> None:
        """The phases FAKE_TRAINER_PHASES names, then (FAKE_TRAINER_GATE) a wait for the test."""
        for name in filter(None, os.environ.get("FAKE_TRAINER_PHASES", "").split(",")):
            phase = StartupPhase(phase=name, attempt=self.attempt, op="deepspeed_shm_comm")  # type: ignore[arg-type]
            event(phase, phase.label())
        await self.until_gate("FAKE_TRAINER_GATE")

    async def train(self, writer: asyncio.StreamWriter) -> int:
        def event(payload: Payload, message: str = "") -> None:
            writer.write(encode(as_message(payload, message)))

        await self.start_up(event)
        event(started(self.attempt), f"fake trainer attempt {self.attempt}")
        period = 1.0 / self.rate_hz
        for step in range(self.first_step, self.first_step + self.steps):
            self.step = step
            if not self.running.is_set():
                await self.hold(event, step - 1)
            if self.stop.is_set():
                event(TrainerFinished(reason="stopped", step=step - 1), "stopped on request")
                return 0
            if step == self.stuck_at:
                await self.until_gate("FAKE_TRAINER_STUCK_GATE")
            self.apply_chaos(event, step)
            report = sample(step, self.attempt, self.nan_at, self.micro_batch)
            if step <= self.bad_steps[0]:
                report = report.model_copy(update={"loss": math.nan, "overflow": self.bad_steps[1]})
            if self.eval_every and step > 1 and (step - 1) % self.eval_every == 0:
                report = report.model_copy(update={"eval_s": EVAL_SECONDS})  # the eval just before
            writer.write(encode(StepReport(sample=report)))
            if self.eval_every and step % self.eval_every == 0:
                event(evaluated(step, report.loss), f"eval at step {step}")
            if self.event_every and step % self.event_every == 0:
                tick = TrainerEvent(type="fake.tick", message=f"step {step}", data={"step": step})
                writer.write(encode(tick))  # a type the supervisor does not know: stored as sent
            await writer.drain()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stop.wait(), period)
        if self.exit_code:
            failure = TrainerError(error="FakeFailure", restartable=None)
            event(failure, f"fake trainer failing on purpose with code {self.exit_code}")
            return self.exit_code
        if self.stop.is_set():
            event(TrainerFinished(reason="stopped", step=self.step), "stopped on request")
        else:
            event(TrainerFinished(reason="completed", step=self.step), f"reached step {self.step}")
        return 0


def main() -> int:
    argv: list[str] | None = sys.argv[1:]
    if is_standby(sys.argv[1:]):  # a spare: nothing to import, it waits for its attempt at once
        argv = await_orders(lambda: None)
        if argv is None:
            return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--attempt", type=int, default=1)
    args = parser.parse_args(argv)
    rank = int(os.environ.get("RANK", "0") or 0)
    sink = open_live_stack_file(args.run_dir, args.attempt, rank, os.getpid())  # as the real one
    faulthandler.register(signal.Signals[STACK_DUMP_SIGNAL], file=sink, all_threads=True)
    return asyncio.run(FakeTrainer(args.run_dir, args.attempt).run())


if __name__ == "__main__":
    sys.exit(main())
