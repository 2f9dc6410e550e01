"""The supervisor's side of alerts and hardware: the timers, the readings off the event
loop, and the user's alert command. The rules themselves are ``engine.alerts.rules``.

``AlertWatch`` is given a ``record`` callback (the supervisor's journal, which stores
the event and fans it out) and is fed step samples and restarts; ``run()`` is its timer
task: a heartbeat check every ``TICK_S``, a hardware reading every
``alerts.hardware_interval_s`` and a doctor report at start and every
``alerts.doctor_interval_s``. NVML and disk reads run in ``asyncio.to_thread``. Once,
``ops_delay_s`` after start, DeepSpeed's op compatibility is surveyed in a child process
(``engine.doctor.deepspeed_ops``: it imports torch and DeepSpeed, seconds of a core) unless the
run directory holds the survey of an earlier supervisor in this environment
(``engine.doctor.op_survey_record``); a doctor report with it follows, and every later report
carries the same answer. At start,
``resolve_stale`` closes the alerts a previous supervisor left firing. Torch-free.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shlex
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from engine.alerts.rules import Alert, AlertRules, restart_resolutions, still_firing
from engine.config.run_config import AlertConfig, MemoryConfig
from engine.doctor.deepspeed_ops import OpSurvey, survey_ops_async
from engine.doctor.op_survey_record import environment_key, read_record, write_record
from engine.domain import Event, Severity, TelemetrySample
from engine.events import DoctorReported, Payload, Recorder
from engine.hardware_report import HardwareSnapshot

log = logging.getLogger(__name__)

FIRST_DOCTOR_S = 2.0
"""Seconds after start before the first doctor report: the trainer's launch (imports, CPU)
comes first, and the doctor's readings do not race it on a small machine."""
OPS_SURVEY_DELAY_S = 30.0
"""Seconds after start before the op survey: after the trainer's launch and first steps,
which a second import of torch and DeepSpeed would slow on a small machine."""
TICK_S = 0.5
"""Seconds between heartbeat checks; the heartbeat alert comes within no_step_s + this."""


def newest_checkpoint_bytes(directory: Path) -> int:
    """Size of the newest committed checkpoint tag (what the next save will roughly need)."""
    from engine.checkpoints.catalog import committed_tags

    tags = committed_tags(directory)
    if not tags:
        return 0
    newest = directory / tags[-1][1]
    return sum(p.stat().st_size for p in newest.rglob("*") if p.is_file())


async def run_alert_command(command: str, payload: dict[str, Any], timeout_s: float) -> int | None:
    """Run the user's alert command with ``payload`` as JSON on stdin; its exit status,
    None if it could not start or ran past ``timeout_s`` (then it is killed)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *shlex.split(command),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except (OSError, ValueError) as err:
        log.warning("alert command %r could not start: %s", command, err)
        return None
    try:
        await asyncio.wait_for(proc.communicate(json.dumps(payload).encode()), timeout_s)
    except asyncio.TimeoutError:
        log.warning("alert command %r ran past %g s: killed", command, timeout_s)
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        return None
    if proc.returncode:
        log.warning("alert command %r exited with status %s", command, proc.returncode)
    return proc.returncode


class AlertWatch:
    """Alerts and hardware readings for one supervised run."""

    def __init__(
        self,
        config: AlertConfig,
        record: Recorder,
        *,
        run_dir: Path,
        checkpoint_dir: Path,
        pids: Callable[[], dict[str, int]],
        expecting_steps: Callable[[], bool],
        nvml: Any = "default",
        on_hardware: Callable[[HardwareSnapshot], None] | None = None,
        ops_delay_s: float | None = OPS_SURVEY_DELAY_S,
        required_ops: Sequence[str] = (),
        memory: MemoryConfig | None = None,
        share_cores: Callable[[int], None] = lambda cores: None,
    ) -> None:
        self.config = config
        self._share_cores = share_cores
        """Asks the running trainer to leave cores to the op survey's child while it runs
        (1), and takes them back (0): on a 2-core host its imports beside training stretched
        ``tiny``'s 25 ms steps to 0.9 s for about 3 s, and raised the throughput alert."""
        self._on_hardware = on_hardware
        """Told every new reading (the supervisor sends it to consoles); must not block."""
        self.rules = AlertRules(config, memory)
        self._record = record
        self._checkpoints = checkpoint_dir
        self._run_dir = run_dir
        self._expecting = expecting_steps
        from engine.doctor.examiner import EnvironmentDoctor
        from engine.doctor.hardware_probe import HardwareProbe
        from engine.doctor.nvml_probe import default_library
        from engine.doctor.nvml_session import NvmlSession

        given = default_library() if nvml == "default" else nvml
        self._nvml = None if given is None else NvmlSession(given)
        """NVML initialised once for the supervisor's life (closed by ``close``)."""
        library: Any = self._nvml
        self.probe = HardwareProbe(library, {"run": run_dir, "checkpoints": checkpoint_dir}, pids)
        self.doctor = EnvironmentDoctor(
            library,
            run_dir=run_dir,
            checkpoint_dir=checkpoint_dir,
            probe=self.probe,
            required_ops=required_ops,
        )
        self._ops_delay_s = ops_delay_s
        """Seconds after start before the one op survey; None: never (no DeepSpeed trainer)."""
        self._ops_task: asyncio.Task[None] | None = None
        self._doctor_due = False
        """A doctor report is due at the next tick (the op survey has answered)."""
        self.latest: HardwareSnapshot | None = None
        """The newest hardware reading."""
        self._commands: set[asyncio.Task[Any]] = set()

    # ---------------------------------------------------------------- inputs

    def trainer_launched(self) -> None:
        self.rules.beat(time.time())

    def on_step(self, sample: TelemetrySample) -> None:
        self.raise_all(self.rules.on_step(sample, time.time()))

    def on_restart(self, message: str, data: dict[str, Any]) -> None:
        self.raise_all(self.rules.on_restart(time.time(), message, data))

    def resolve_stale(self, events: Iterable[Event]) -> int:
        """Close what a previous supervisor left firing (``events``: the store's, in order).

        Called once at start, before any rule runs: see ``alert_rules.restart_resolutions``
        for why a restarted supervisor resolves them (with the reason) rather than carries them
        over. Returns how many it closed.
        """
        alerts = restart_resolutions(still_firing(events))
        try:
            self.raise_all(alerts)
        except Exception:  # e.g. the store refusing a write (disk full): the run goes on
            log.exception("closing the previous supervisor's alerts failed")
            return 0
        return len(alerts)

    def raise_all(self, alerts: list[Alert]) -> None:
        for alert in alerts:
            self.record(alert.payload(), alert.message, severity=alert.severity)

    def record(self, payload: Payload, message: str = "", *, severity: Severity | None = None) -> Event:
        """Record one ``alert`` event and hand it to the alert command: the rules' alerts, and
        those a part judges itself (a planner that keeps failing). An ``engine.events.Recorder``."""
        event = self._record(payload, message, severity=severity)
        if self.config.command:
            task = asyncio.ensure_future(
                run_alert_command(
                    self.config.command, event.model_dump(mode="json"), self.config.command_timeout_s
                )
            )
            self._commands.add(task)
            task.add_done_callback(self._commands.discard)
        return event

    # ---------------------------------------------------------------- timers

    async def run(self) -> None:
        """Until cancelled: heartbeat every TICK_S, hardware and doctor at their intervals."""
        loop = asyncio.get_running_loop()
        next_hardware = next_doctor = loop.time() + FIRST_DOCTOR_S
        if self._ops_delay_s is not None:
            self._ops_task = asyncio.ensure_future(self._survey_ops(self._ops_delay_s))
        try:
            while True:
                next_hardware, next_doctor = await self._tick(loop.time(), next_hardware, next_doctor)
                await asyncio.sleep(TICK_S)
        finally:
            if self._ops_task is not None:
                self._ops_task.cancel()  # kills the survey's child

    async def _tick(self, now: float, next_hardware: float, next_doctor: float) -> tuple[float, float]:
        """One tick; returns when the hardware and doctor are next due (loop seconds)."""
        try:
            self.raise_all(self.rules.on_tick(time.time(), self._expecting()))
            if now >= next_doctor or self._doctor_due:
                self._doctor_due = False
                next_doctor = now + self.config.doctor_interval_s
                next_hardware = now + self.config.hardware_interval_s
                await self._doctor()
            elif now >= next_hardware:
                next_hardware = now + self.config.hardware_interval_s
                await self._hardware()
        except Exception:  # e.g. the store refusing a write (disk full): the next tick tries again
            log.exception("alert tick failed")
        return next_hardware, next_doctor

    async def _survey_ops(self, delay_s: float) -> None:
        """The one op survey, ``delay_s`` after start, unless an earlier supervisor of the run
        recorded one for this environment (read at once); the doctor keeps the answer, and
        reports it at the next tick."""
        try:
            key = await asyncio.to_thread(environment_key)
            survey = await asyncio.to_thread(read_record, self._run_dir, key)
            if survey is None:
                await asyncio.sleep(delay_s)
                survey = await self._survey_beside_training()
                await asyncio.to_thread(write_record, self._run_dir, key, survey)
            self.doctor.op_survey = survey
        except Exception:  # the survey must never take the run down
            log.exception("DeepSpeed op survey failed")
            return
        self._doctor_due = True

    async def _survey_beside_training(self) -> OpSurvey:
        """The survey's child, with a core borrowed from training while it runs."""
        self._share_cores(1)
        try:
            return await survey_ops_async()
        finally:
            self._share_cores(0)

    async def _doctor(self) -> None:
        try:
            report = await asyncio.to_thread(self.doctor.examine)
        except Exception:  # the doctor must never take the run down
            log.exception("doctor failed")
            return
        self._record(
            DoctorReported.model_validate(report.model_dump()),
            f"doctor: {report.verdict}" + (f" ({'; '.join(report.reasons)})" if report.reasons else ""),
            severity="warning" if report.verdict != "healthy" else "info",
        )
        await self._judge_hardware(report.hardware)

    async def _hardware(self) -> None:
        try:
            snapshot = await asyncio.to_thread(self.probe.read)
        except Exception:
            log.exception("hardware reading failed")
            return
        await self._judge_hardware(snapshot)

    async def _judge_hardware(self, snapshot: HardwareSnapshot) -> None:
        self.latest = snapshot
        if self._on_hardware is not None:
            try:
                self._on_hardware(snapshot)
            except Exception:  # a console fan-out bug must not stop the alerts
                log.exception("hardware fan-out failed")
        try:
            need = await asyncio.to_thread(newest_checkpoint_bytes, self._checkpoints)
        except OSError:
            need = 0
        self.raise_all(self.rules.on_hardware(snapshot, time.time(), need))

    async def close(self) -> None:
        if self._ops_task is not None:
            self._ops_task.cancel()  # kills the survey's child, if it still runs
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._ops_task
        for task in list(self._commands):
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(task), self.config.command_timeout_s)
        if self._nvml is not None:
            with contextlib.suppress(Exception):  # a failing shutdown costs nothing we need
                self._nvml.close()
