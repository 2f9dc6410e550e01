"""The warm standby trainer: one spare process, already past its imports, that the next
restart hands its attempt to instead of starting a trainer cold. Torch-free.

A restart that starts ``python -m engine.trainer`` cold pays for importing torch and
DeepSpeed and loading the ops (seconds on a CPU) before it even reads its checkpoint. So
the supervisor keeps a spare, ``python -m engine.trainer --standby RUN_DIR`` (``restart.standby``,
on by default): started in a session of its own, once the running trainer has stepped for
``restart.standby_after_s`` (its imports never slow a trainer's start, and a run of seconds
never pays for one), it warms up, says ``ready`` on its stdout and waits on its
stdin (``engine.run.standby_orders``). A restart writes the attempt's orders (its arguments
and its log) and the spare becomes that attempt: the same pid, its own process group, an
ordinary trainer from then on; a new spare starts behind it once that attempt steps (not
before: its start would slow the restarted trainer's start-up and first step). A spare
warms up at the lowest priority (``engine.trainer.standby.warm_aside``): on a CPU host the
running trainer's steps come first. A priority is not enough there, as torch's intra-op
threads wait for each other at every op: while a spare warms up, the running trainer is
asked to leave it one core (``CoreShare``, ``engine.trainer.core_share``).

- Its cost while it waits (resident memory, CPU over ``IDLE_WINDOW_S``) is measured once it
  is ready and recorded (``standby_ready``).
- A spare that dies while it waits is recorded (``standby_lost``) and replaced after a
  backoff that doubles for each spare in a row that dies within ``HEALTHY_AFTER_S``: a
  spare that cannot start never becomes a restart loop.
- It never outlives the run: a stop or the run's end kills it (``retire``), and while it
  waits it dies with the supervisor (``PR_SET_PDEATHSIG``: a whole-tree kill leaves none,
  and the next supervisor starts its first trainer cold). It is never the run's trainer
  until it is handed an attempt: not in the meta's ``trainer_pid``, the hang watch, the
  hardware panel's processes or a chaos kill.
- One rank on one node only. With several ranks the processes are torchrun's, started after
  the rendezvous with the attempt's world; a spare torchrun would still rendezvous, start
  its ranks and import in each, so it would save little, and torchrun's own restarts would
  go behind the supervisors' backs (``trainer_process.Placement``). Several ranks start cold.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
import subprocess
import time
from collections.abc import Callable
from functools import partial
from typing import IO, Any

from engine.config.run_config import RunConfig
from engine.events import StandbyLost, StandbyReady, StartupPhase
from engine.run.directory import RunDir
from engine.run.standby_orders import READY, StandbyOrders
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.spare_launch import spare_command, spare_environment, spare_popen
from engine.supervisor.trainers.trainer_launcher import LaunchedProcess, fork
from engine.supervisor.trainers.trainer_process import kill_group

log = logging.getLogger(__name__)

IDLE_WINDOW_S = 5.0  # s over which a ready spare's idle CPU is measured
BACKOFF_INITIAL_S = 1.0  # s before replacing the first spare of a row that died young
BACKOFF_MAX_S = 60.0  # s: the longest wait between two spares
HEALTHY_AFTER_S = 60.0  # s a spare must have lived for its death to start a new row
POLL_S = 0.5  # s between looks at the run's state and steps while waiting for the trainer to step


class Spare:
    """One spare process and what the supervisor knows of it."""

    def __init__(self, proc: LaunchedProcess, started: float, head_start: bool = False) -> None:
        self.proc = proc
        self.started = started
        """``time.monotonic()`` at its launch (or adoption)."""
        self.head_start = head_start
        """Started by the supervisor for its own first attempt (``spare_launch.head_start``)."""
        self.taken = asyncio.Event()
        """Set once it was handed an attempt (it is the run's trainer from then on)."""
        self.ready = False
        """It said ``ready``: its imports are done."""

    @property
    def note(self) -> str:
        """What the ``trainer_launched`` line of the attempt it became says of it."""
        return ", the head start begun with the supervisor" if self.head_start else ", the standby"

    def warming(self, attempt: int) -> StartupPhase | None:
        """The start-up phase of the attempt it became, when it was handed that attempt while
        still importing (a head start, taken a second after its launch): the trainer says its
        phases only once it has its orders, after the imports, so the supervisor says this one."""
        return None if self.ready else StartupPhase(phase="importing", attempt=attempt)


class Standby:
    """Keeps one spare trainer for ``run`` while the run trains; ``take`` hands it an attempt."""

    def __init__(
        self,
        run: RunDir,
        command: list[str],
        journal: Journal,
        share: Callable[[int], None] = lambda cores: None,
        after_s: float = 0.0,
    ) -> None:
        self.run = run
        self.command = command
        """The spare's command line (``python -m engine.trainer --standby``); its run dir is appended."""
        self.journal = journal
        """Records the spare's events; its state ``running`` (the trainer steps) lets a spare
        start without slowing a trainer's start-up."""
        self.share = share
        """Asks the running trainer to leave this many cores to other work (``CoreShare``):
        1 while a spare warms up, 0 once it is ready, taken or dead."""
        self.after_s = after_s
        """Seconds the newest attempt steps before a spare starts (``restart.standby_after_s``)."""
        self._spare: Spare | None = None
        self._retired = asyncio.Event()
        self._adopted: Spare | None = None  # the head start, watched before any spare of our own
        self._deaths = 0  # spares in a row that died young

    @property
    def pid(self) -> int | None:
        """The waiting spare's pid, or None."""
        spare = self._spare
        return spare.proc.pid if spare is not None and spare.proc.returncode is None else None

    async def keep(self) -> None:
        """Keep a spare until the run is retired: start one once the trainer has stepped for
        ``after_s``, replace it when it is taken (likewise after the next trainer's first
        step) or dies (after a backoff). The head start, if one was adopted, comes first."""
        if self._adopted is not None:
            await self._watch(self._adopted)
        while not self._retired.is_set():
            await self._until_stepping()
            if self._retired.is_set():
                return
            spare = await self._start()
            if spare is None:
                await self._pause(self._backoff(0.0))
                continue
            self._spare = spare
            await self._watch(spare)

    async def _until_stepping(self) -> None:
        """Until the newest attempt has been stepping for ``after_s`` (``stepping_attempt``):
        a spare's start never competes with a trainer's start-up or its first step, the end
        of a recovery, and a run that ends within ``after_s`` never starts one."""
        first_seen: dict[int, float] = {}
        while not self._retired.is_set():
            if spare_due(first_seen, stepping_attempt(self.journal), time.monotonic(), self.after_s):
                return
            await self._pause(POLL_S)

    def adopt(self, popen: subprocess.Popen[bytes]) -> None:
        """Keep the supervisor's head start (``spare_launch.head_start``) as the waiting spare:
        the first attempt is handed to it. Call before ``keep``, in the event loop."""
        spare = Spare(LaunchedProcess(popen, asyncio.get_running_loop()), time.monotonic(), head_start=True)
        self._spare = self._adopted = spare
        log.info("head start: the first trainer (pid %d) began its imports with the supervisor", popen.pid)

    async def _start(self) -> Spare | None:
        self.share(1)  # its imports get a core of their own, not a slice of every one
        try:
            start = partial(spare_popen, self.run, self.command, spare_environment())
            proc = await fork(start, group=True)
        except OSError as err:
            self.share(0)
            log.warning("could not start a standby trainer (%s): %s", " ".join(self.command), err)
            return None
        log.info("standby trainer started (pid %d)", proc.pid)
        return Spare(proc, time.monotonic())

    async def _watch(self, spare: Spare) -> None:
        """Until the spare is taken or dies: its ready line and idle cost, or its death."""
        measure = asyncio.create_task(self._measure(spare))
        ended = asyncio.create_task(spare.proc.wait())
        taken = asyncio.create_task(spare.taken.wait())
        await asyncio.wait({ended, taken}, return_when=asyncio.FIRST_COMPLETED)
        self.share(0)  # no warm-up goes on (it was measured ready, taken or died)
        measure.cancel()
        taken.cancel()
        if spare.taken.is_set():
            ended.cancel()
            self._deaths = 0
            return
        self._spare = None
        if self._retired.is_set():
            return
        lived = time.monotonic() - spare.started
        delay = self._backoff(lived)
        code = ended.result()
        self.journal.record(
            StandbyLost(pid=spare.proc.pid, returncode=code, retry_in_s=delay),
            f"standby trainer pid {spare.proc.pid} died while it waited (status {code}); "
            f"another starts in {delay:g} s",
        )
        await self._pause(delay)

    async def _measure(self, spare: Spare) -> None:
        """Read its ready line, then record what it costs while it waits."""
        pipe: IO[bytes] | None = spare.proc.stdout
        if pipe is None:
            return
        reading = asyncio.ensure_future(asyncio.to_thread(pipe.readline))
        reading.add_done_callback(lambda _: pipe.close())  # its thread ends at EOF, even if we do not wait
        line = await asyncio.shield(reading)
        if line != READY:
            return  # it died (or was taken) before it was ready
        spare.ready = True
        self.share(0)
        warmup = time.monotonic() - spare.started
        before = await asyncio.to_thread(_usage, spare.proc.pid)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(spare.taken.wait(), IDLE_WINDOW_S)
        after = await asyncio.to_thread(_usage, spare.proc.pid)
        if before is None or after is None:
            return
        window = max(after[0] - before[0], 1e-3)
        cpu = 100.0 * (after[1] - before[1]) / window
        rss = after[2] / 2**20
        self.journal.record(
            StandbyReady(
                pid=spare.proc.pid, warmup_s=warmup, rss_mib=rss, idle_cpu_percent=cpu, idle_window_s=window
            ),
            f"standby trainer ready (pid {spare.proc.pid}, warmed up in {warmup:.1f} s): "
            f"{rss:.0f} MiB resident, {cpu:.1f}% of a core while it waits",
        )

    def _backoff(self, lived_s: float) -> float:
        self._deaths = 1 if lived_s >= HEALTHY_AFTER_S else self._deaths + 1
        return min(BACKOFF_INITIAL_S * 2.0 ** (self._deaths - 1), BACKOFF_MAX_S)

    async def _pause(self, delay_s: float) -> None:
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._retired.wait(), delay_s)

    # ------------------------------------------------------------------ handing over

    def take(self, orders: StandbyOrders) -> Spare | None:
        """Hand the waiting spare ``orders``: it is that attempt's trainer from now on. None:
        there is no live spare (the attempt starts cold).

        A spare still warming up is handed the attempt too, though its imports go on at nice
        19: with the trainer gone, the cores are the spare's, and a spare has a session (on
        Linux, a scheduler autogroup) of its own, so other work at nice 0 does not starve it.
        Measured (``bench/recovery_time.py --mode warming --kills 5``, tiny, 2 cores): kill ->
        next step 3.97 s taking it against 4.49 s passing it over for a cold start, quiet;
        3.03 s against 5.25 s beside two busy loops."""
        spare, self._spare = self._spare, None
        if spare is None or spare.proc.returncode is not None or spare.proc.stdin is None:
            return None
        try:
            spare.proc.stdin.write(orders.encode())  # one short line: the pipe takes it at once
            spare.proc.stdin.close()
        except OSError as err:  # it died a moment ago
            log.warning("standby trainer pid %d could not take its orders: %s", spare.proc.pid, err)
            kill_group(spare.proc.pid, signal.SIGKILL)
            return None
        spare.taken.set()
        return spare

    def retire(self) -> None:
        """The run stops or ends: no more spares, and the waiting one is killed."""
        self._retired.set()
        spare = self._spare
        if spare is not None and spare.proc.returncode is None:
            kill_group(spare.proc.pid, signal.SIGKILL)
        if spare is not None and spare.proc.stdin is not None:
            with contextlib.suppress(OSError):
                spare.proc.stdin.close()

    async def close(self) -> None:
        """Retire, and wait for the killed spare to be gone."""
        spare = self._spare
        self.retire()
        if spare is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(spare.proc.wait(), 5.0)


def spare_due(first_seen: dict[int, float], attempt: int | None, now: float, after_s: float) -> bool:
    """True once ``attempt`` (None: none is stepping) has been seen stepping for ``after_s``.
    ``first_seen``: attempt -> ``now`` (s) when it was first seen stepping, kept by the caller
    and filled in here; a restart's attempt starts its own wait."""
    if attempt is None:
        return False
    return now - first_seen.setdefault(attempt, now) >= after_s


def stepping_attempt(journal: Journal) -> int | None:
    """The newest attempt (the meta's) if the run trains and that attempt has made a step; a
    sample of an earlier attempt, before a restart's first step, does not count."""
    if journal.state != "running":
        return None
    latest = journal.store.latest_step()
    attempt = journal.store.read_meta().attempt
    return attempt if latest is not None and latest.attempt == attempt else None


def standby_for(
    config: RunConfig,
    run: RunDir,
    journal: Journal,
    spawn: Callable[..., Any],
    custom_trainer: bool,
    share: Callable[[int], None] = lambda cores: None,
    head_start: subprocess.Popen[bytes] | None = None,
) -> Standby | None:
    """The run's standby, keeping spares in a task ``spawn(coroutine, name)`` starts, if it
    has one (``spare_launch.spare_command``). ``share``: asks the running trainer to leave a
    core while a spare warms up (``core_loans``). ``head_start``: the spare the supervisor
    started for its first attempt, adopted (killed if the run keeps no spare after all)."""
    command = spare_command(config, custom_trainer)
    if command is None:
        if head_start is not None:
            kill_group(head_start.pid, signal.SIGKILL)
            head_start.wait()
        return None

    standby = Standby(run, command, journal, share, config.restart.standby_after_s)
    if head_start is not None:
        standby.adopt(head_start)
    spawn(standby.keep(), "standby trainer")
    return standby


def _usage(pid: int) -> tuple[float, float, int] | None:
    """(monotonic s, CPU s used, resident bytes) of ``pid``; None if it is gone."""
    import psutil  # imported when needed, as the other process probes here

    try:
        process = psutil.Process(pid)
        with process.oneshot():
            cpu: Any = process.cpu_times()
            return time.monotonic(), cpu.user + cpu.system, process.memory_info().rss
    except psutil.Error:
        return None
