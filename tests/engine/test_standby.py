"""The warm standby trainer: the in-process supervisor with the torch-free fake trainer,
which waits as a spare the way the real one does (``engine.trainer.standby``)."""

from __future__ import annotations

import io
import os
import shlex
import signal
from pathlib import Path
from typing import Any

import psutil
import pytest

from engine.config.run_config import RestartConfig, RunConfig
from engine.run.directory import RunDir, pid_alive
from engine.run.standby_orders import HEAD_START_ENV, STANDBY_FLAG, StandbyOrders
from engine.run.storage.store import Store
from engine.supervisor.trainers.spare_launch import (
    STANDBY_CMD_ENV,
    default_standby_command,
    head_start,
    spare_command,
)
from engine.supervisor.trainers.trainer_process import TRAINER_CMD_ENV
from engine.trainer.standby import is_standby
from tests.engine.conftest import FAKE_TRAINER_CMD

pytestmark = pytest.mark.timeout(180)  # each wait ends when its condition holds

SPARE_CMD = [*FAKE_TRAINER_CMD, STANDBY_FLAG]


@pytest.fixture(autouse=True)
def fake_spare_command(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake trainer's spare: a supervisor given a trainer command has none unless told."""
    monkeypatch.setenv(STANDBY_CMD_ENV, shlex.join(SPARE_CMD))


def restart_config(run: RunDir, **restart: Any) -> RunConfig:
    """The run's config with ``restart`` fields changed."""
    config = run.read_config()
    return config.model_copy(update={"restart": config.restart.model_copy(update=restart)})


def spare_at_once(run: RunDir) -> RunConfig:
    """A spare from the first step (``restart.standby_after_s = 0``): the tests wait for spares."""
    return restart_config(run, standby_after_s=0.0)


def events(run: RunDir, type_: str) -> list[dict[str, Any]]:
    with Store(run.store, readonly=True) as store:
        return [e.data for e in store.events_since(0) if e.type == type_]


def launch_of(run: RunDir, attempt: int) -> dict[str, Any] | None:
    return next((e for e in events(run, "trainer_launched") if e["attempt"] == attempt), None)


def stepped(run: RunDir, attempt: int) -> bool:
    with Store(run.store, readonly=True) as store:
        latest = store.latest_step()
    return latest is not None and latest.attempt == attempt


def ready_other_than(run: RunDir, *pids: int) -> dict[str, Any] | None:
    return next((e for e in events(run, "standby_ready") if e["pid"] not in pids), None)


@pytest.mark.slow
async def test_the_standby_takes_over_after_a_sigkill_and_another_waits_behind_it(
    run: RunDir, start, fake_env, wait_until
) -> None:
    running = await start(config=spare_at_once(run))
    spare = await wait_until(lambda: ready_other_than(run), "a spare ready")
    assert spare["rss_mib"] > 0 and spare["idle_cpu_percent"] >= 0  # its idle cost, measured
    first = running.supervisor.attempts.pid
    assert first is not None and first != spare["pid"]  # the spare is not the run's trainer
    assert running.supervisor.attempts.pids() == {"trainer": first}
    os.killpg(first, signal.SIGKILL)

    second = await wait_until(lambda: launch_of(run, 2), "attempt 2 launched")
    assert second["pid"] == spare["pid"] and second["standby"] is True
    await wait_until(lambda: stepped(run, 2), "a step of the spare turned trainer")
    assert running.supervisor.attempts.pid == spare["pid"]
    behind = await wait_until(lambda: ready_other_than(run, spare["pid"]), "a new spare behind it")
    assert behind["pid"] != spare["pid"] and pid_alive(behind["pid"])


@pytest.mark.slow
async def test_a_spare_that_dies_is_replaced(run: RunDir, start, fake_env, wait_until) -> None:
    await start(config=spare_at_once(run))
    spare = await wait_until(lambda: ready_other_than(run), "a spare ready")
    assert str(run.path) in psutil.Process(spare["pid"]).cmdline()  # ps names its run
    os.killpg(spare["pid"], signal.SIGKILL)
    lost = await wait_until(lambda: events(run, "standby_lost"), "the spare's death recorded")
    assert lost[0]["pid"] == spare["pid"] and lost[0]["returncode"] == -signal.SIGKILL
    assert lost[0]["retry_in_s"] > 0  # a backoff, never a loop
    await wait_until(lambda: ready_other_than(run, spare["pid"]), "a replacement spare")


@pytest.mark.slow
async def test_a_stop_kills_the_spare_with_the_run(run: RunDir, start, connect, fake_env, wait_until) -> None:
    running = await start(config=spare_at_once(run))
    spare = await wait_until(lambda: ready_other_than(run), "a spare ready")
    running.supervisor.attempts.stop("test")
    assert await running.result() == 0
    await wait_until(lambda: not pid_alive(spare["pid"]), "the spare gone with the run")


@pytest.mark.slow
async def test_standby_false_starts_none_and_restarts_cold(run: RunDir, start, fake_env, wait_until) -> None:
    running = await start(config=restart_config(run, standby=False, standby_after_s=0.0))
    assert running.supervisor.attempts.standby is None
    await wait_until(lambda: stepped(run, 1), "a first step")
    first = running.supervisor.attempts.pid
    assert first is not None
    os.killpg(first, signal.SIGKILL)
    await wait_until(lambda: stepped(run, 2), "a step of the restarted trainer")
    second = launch_of(run, 2)
    assert second is not None and second["standby"] is False and second["pid"] != first
    assert events(run, "standby_ready") == []


@pytest.mark.slow
async def test_the_head_start_is_the_first_attempts_trainer_and_a_spare_follows_it(
    run: RunDir, start, fake_env, wait_until
) -> None:
    head = head_start(run)  # as python -m engine supervise does, before it builds the supervisor
    assert head is not None
    assert f"{HEAD_START_ENV}=1".encode() in Path(f"/proc/{head.pid}/environ").read_bytes().split(b"\0")
    running = await start(config=spare_at_once(run), head_start=head)
    first = await wait_until(lambda: launch_of(run, 1), "attempt 1 launched")
    assert first["pid"] == head.pid and first["head_start"] is True and first["standby"] is False
    await wait_until(lambda: stepped(run, 1), "a step of the head start turned trainer")
    assert running.supervisor.attempts.pid == head.pid
    behind = await wait_until(lambda: ready_other_than(run, head.pid), "a spare behind it")
    assert pid_alive(behind["pid"])


def test_no_head_start_where_the_run_keeps_no_spare(run: RunDir) -> None:
    config = run.read_config()
    assert spare_command(config, custom_trainer=False) == SPARE_CMD
    changes = [("restart", {"standby": False}), ("train", {"ranks": 2}), ("train", {"nodes": 2})]
    for section, fields in changes:
        changed = config.model_copy(update={section: getattr(config, section).model_copy(update=fields)})
        assert spare_command(changed, custom_trainer=False) is None, fields
    run.write_config(restart_config(run, standby=False))
    assert head_start(run) is None
    run.config_file.write_text("{not json")
    assert head_start(run) is None  # the supervisor says why, and ends the run


def test_standby_is_on_by_default() -> None:
    assert RestartConfig().standby is True


def test_the_spare_command() -> None:
    assert default_standby_command({})[-3:] == ["-m", "engine.trainer", STANDBY_FLAG]  # type: ignore[index]
    assert default_standby_command({TRAINER_CMD_ENV: "my-trainer"}) is None  # it may not speak --standby
    assert default_standby_command({}, custom_trainer=True) is None  # a command given to the supervisor
    assert default_standby_command({TRAINER_CMD_ENV: "t", STANDBY_CMD_ENV: "t --standby"}) == [
        "t",
        "--standby",
    ]


def test_orders_round_trip_and_bad_orders_name_the_field() -> None:
    orders = StandbyOrders(["/r", "--attempt", "2"], "/r/logs/trainer-2.log")
    assert StandbyOrders.decode(orders.encode()) == orders
    with pytest.raises(ValueError, match="'argv'"):
        StandbyOrders.decode(b'{"argv": "x", "log": "/l"}\n')
    with pytest.raises(ValueError, match="'log'"):
        StandbyOrders.decode(b'{"argv": [], "log": ""}\n')
    with pytest.raises(ValueError, match="not JSON"):
        StandbyOrders.decode(b"ready\n")


def test_a_spare_is_told_by_its_first_argument() -> None:
    assert is_standby([STANDBY_FLAG]) and is_standby([STANDBY_FLAG, "/runs/r"])
    assert not is_standby(["/runs/r", "--attempt", "2"]) and not is_standby([STANDBY_FLAG, "/r", "x"])


class _Pipe(io.BytesIO):
    """A spare's stdin that keeps what was written to it once closed."""

    written = b""

    def close(self) -> None:
        self.written = self.getvalue()
        super().close()


class _Proc:
    """A spare's process as ``Standby`` sees it; never a real pid."""

    def __init__(self) -> None:
        self.pid, self.returncode, self.stdin, self.stdout = 999_999, None, _Pipe(), None


def test_a_restart_hands_its_attempt_to_a_spare_ready_or_still_warming(run: RunDir) -> None:
    """Taking a warming spare measured faster than a cold start, quiet and beside busy loops
    (``Standby.take``): each is handed the orders; a dead one is not."""
    from engine.supervisor.trainers import standby as standby_module

    keeper = standby_module.Standby(run, SPARE_CMD, journal=None)  # type: ignore[arg-type]
    orders = StandbyOrders(["RUN", "--attempt", "2"], "/dev/null")
    for ready in (True, False):
        proc = _Proc()
        spare = standby_module.Spare(proc, 0.0)  # type: ignore[arg-type]
        spare.ready = ready
        keeper._spare = spare
        assert keeper.take(orders) is spare and proc.stdin.written == orders.encode()
        assert spare.taken.is_set() and keeper._spare is None
    dead = _Proc()
    dead.returncode = -9
    keeper._spare = standby_module.Spare(dead, 0.0)  # type: ignore[arg-type]
    assert keeper.take(orders) is None and dead.stdin.getvalue() == b""
