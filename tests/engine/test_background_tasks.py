"""No supervisor task dies in silence: an unexpected exception is logged with the task's
name and raised as an alert (a recorded failure when the run needs the task), and a log
file that refuses lines costs the lines, never the supervisor."""

from __future__ import annotations

import asyncio
import errno
import gc
import io
import logging
from typing import Any

import pytest

from engine.events import TASK_FAILED_RULE, AlertRaised
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.supervisor.background_tasks import BackgroundTasks
from engine.supervisor.log_output import LogOutput
from engine.wire.protocol import Stop

pytestmark = pytest.mark.timeout(60)


class Boom(RuntimeError):
    pass


async def explode(after: asyncio.Event | None = None) -> None:
    if after is not None:
        await after.wait()
    raise Boom("on purpose")


def task_alert(m: Any) -> bool:
    alert = AlertRaised.of(m.event) if m.kind == "event" else None
    return alert is not None and alert.rule == TASK_FAILED_RULE


async def test_a_failed_task_is_logged_and_reported_at_once_and_never_left_unretrieved(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    unhandled: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: unhandled.append(context))
    reports: list[tuple[str, BaseException, bool]] = []
    tasks = BackgroundTasks(lambda *report: reports.append(report))
    try:
        with caplog.at_level(logging.ERROR, logger="engine.supervisor.background_tasks"):
            task = tasks.spawn(explode(), "probe", essential=True)
            await asyncio.wait([task])
            await asyncio.sleep(0)  # the done callback runs on the next turn
        assert [(name, type(err), essential) for name, err, essential in reports] == [("probe", Boom, True)]
        (record,) = [r for r in caplog.records if "probe" in r.getMessage()]
        assert record.exc_info is not None and record.exc_info[0] is Boom  # with its traceback
        del task
        gc.collect()  # an unretrieved exception would be reported now
        assert unhandled == []
    finally:
        loop.set_exception_handler(previous)
        await tasks.close()


@pytest.mark.slow
async def test_a_failed_task_becomes_an_alert_and_the_run_goes_on(
    run: RunDir, start, connect, fake_env, caplog: pytest.LogCaptureFixture
) -> None:
    running = await start()
    console = await connect()
    await console.until(lambda m: m.kind == "telemetry")
    running.supervisor._spawn(explode(), "a planner's ask")
    alert, _ = await console.until(task_alert, what="the task's alert")
    assert alert.event.severity == "critical" and alert.event.data["task"] == "a planner's ask"
    assert "Boom: on purpose" in alert.event.message
    assert any("a planner's ask" in r.getMessage() and r.exc_info for r in caplog.records)

    # A trainer report the supervisor fails on costs that report, not the trainer's connection.
    reports = running.supervisor.reports
    on_step, failing = reports.on_step, [True]

    def fail_once(sample: Any) -> None:
        if failing:
            failing.pop()
            raise Boom("a bug on a step")
        on_step(sample)

    reports.on_step = fail_once  # type: ignore[method-assign]
    alert, _ = await console.until(task_alert, what="the step's alert")
    assert alert.event.data["task"] == "trainer step"
    stepped, _ = await console.until(lambda m: m.kind == "telemetry")

    # A callback that raises reaches the loop's exception handler: the same alert.
    def bad_callback() -> None:
        raise Boom("in a callback")

    asyncio.get_running_loop().call_soon(bad_callback)
    alert, _ = await console.until(task_alert, what="the callback's alert")
    assert "in a callback" in alert.event.message
    await console.until(lambda m: m.kind == "telemetry" and m.sample.step > stepped.sample.step)
    await console.answer(Stop(id="stop"))
    assert await running.result() == 0


@pytest.mark.slow
async def test_an_essential_task_that_fails_ends_the_run_as_failed(
    run: RunDir, start, connect, fake_env
) -> None:
    running = await start()
    console = await connect()
    await console.until(lambda m: m.kind == "telemetry")
    running.supervisor._spawn(explode(), "store flush", essential=True)
    alert, _ = await console.until(task_alert)
    assert alert.event.data["essential"] is True and "cannot go on without it" in alert.event.message
    assert await running.result() == 0
    with Store(run.store, readonly=True) as store:
        meta = store.read_meta()
    assert meta.state == "failed" and "'store flush' failed: Boom: on purpose" in (meta.exit_reason or "")


class FullDisk(io.StringIO):
    """A stream that refuses writes while ``full``, as a file on a full disk does."""

    def __init__(self) -> None:
        super().__init__()
        self.full = False

    def write(self, text: str) -> int:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        return super().write(text)


def test_log_lines_refused_by_a_full_disk_are_counted_and_said_once_room_returns() -> None:
    stream = FullDisk()
    logger = logging.getLogger("test.log_output")
    logger.propagate = False
    handler = LogOutput(stream)
    logger.addHandler(handler)
    try:
        logger.warning("first")
        stream.full = True
        logger.warning("lost one")
        logger.warning("lost two")
        stream.full = False
        logger.warning("back")
    finally:
        logger.removeHandler(handler)
    assert stream.getvalue().splitlines() == [
        "first",
        "(2 log lines before this one were lost: [Errno 28] No space left on device)",
        "back",
    ]
