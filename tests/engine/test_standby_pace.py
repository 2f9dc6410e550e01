"""What keeps a spare out of the restarted trainer's way: it starts only once the newest
attempt has stepped, it warms up in a thread at the lowest priority while the main thread
(the attempt's trainer to be) keeps the process's, and the running trainer leaves it a core
meanwhile. No trainer processes."""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

import pytest

from engine.config.config_file import build_run_config
from engine.cpu_share import OMP_WAIT_ENV
from engine.run.directory import RunDir
from engine.run.standby_orders import HEAD_START_ENV
from engine.run.storage.store import Store
from engine.supervisor.channel.consoles import Consoles
from engine.supervisor.journal import Journal
from engine.supervisor.trainers.standby import Spare, Standby, spare_due, stepping_attempt
from engine.supervisor.trainers.trainer_process import trainer_environment
from engine.trainer.core_share import CoreShare
from engine.trainer.standby import SPARE_NICE, warm_aside, warm_in_turn
from tests.engine.planner_samples import sample
from tests.waiting import until


def test_a_spare_waits_for_a_step_of_the_newest_attempt(tmp_path: Path) -> None:
    with Store(tmp_path / "store.sqlite") as store:
        journal = Journal(store, Consoles())
        store.update_meta(attempt=1)
        journal.set_state("running")  # trainer_started: its start-up is over, its first step is not
        assert stepping_attempt(journal) is None
        store.add_step(sample(1, attempt=1))
        assert stepping_attempt(journal) == 1
        store.update_meta(attempt=2)  # a restart: the running state comes before its first step
        assert stepping_attempt(journal) is None
        store.add_step(sample(21, attempt=2))
        assert stepping_attempt(journal) == 2
        journal.set_state("restarting")
        assert stepping_attempt(journal) is None


def test_a_spare_is_due_once_the_attempt_has_stepped_for_standby_after_s() -> None:
    seen: dict[int, float] = {}
    assert not spare_due(seen, None, 100.0, 10.0)  # nothing steps: nothing is timed
    assert seen == {}
    assert not spare_due(seen, 1, 100.0, 10.0)  # attempt 1's first step seen at 100 s
    assert not spare_due(seen, 1, 109.9, 10.0)
    assert spare_due(seen, 1, 110.0, 10.0)
    assert not spare_due(seen, 2, 111.0, 10.0)  # a restart waits afresh, from its own first step
    assert spare_due(seen, 2, 121.0, 10.0)
    assert spare_due({}, 3, 5.0, 0.0)  # 0: at the first step


def test_the_default_config_keeps_a_spare_after_ten_seconds_of_steps() -> None:
    assert build_run_config({}).restart.standby_after_s == 10.0
    with pytest.raises(ValueError, match="standby_after_s"):
        build_run_config({"restart": {"standby_after_s": -1}})


def nice_of(thread_id: int) -> int:
    """The nice value of one of this process's threads (field 19 of its stat)."""
    stat = Path(f"/proc/self/task/{thread_id}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[16])


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="per-thread nice values are Linux's")
def test_the_warm_up_runs_aside_at_the_lowest_priority_and_the_main_thread_keeps_its_own() -> None:
    main_before = nice_of(threading.get_native_id())
    seen: list[tuple[int, int]] = []
    warm_aside(lambda: seen.append((threading.get_native_id(), nice_of(threading.get_native_id()))))
    ((warm_thread, warm_nice),) = seen
    assert warm_thread != threading.get_native_id()
    assert warm_nice == min(19, main_before + SPARE_NICE)
    assert nice_of(threading.get_native_id()) == main_before == os.getpriority(os.PRIO_PROCESS, 0)


def test_the_head_start_warms_up_in_the_main_thread_and_other_spares_aside() -> None:
    threads: list[int] = []
    environ = {HEAD_START_ENV: "1", "OTHER": "x"}
    warm_in_turn(lambda: threads.append(threading.get_native_id()), environ)
    assert threads == [threading.get_native_id()] and environ == {"OTHER": "x"}  # not passed on
    warm_in_turn(lambda: threads.append(threading.get_native_id()), environ)
    assert threads[1] != threading.get_native_id()  # an ordinary spare: its own thread, aside


def test_a_spare_handed_an_attempt_while_it_imports_has_the_supervisor_say_so() -> None:
    spare = Spare(proc=None, started=0.0, head_start=True)  # type: ignore[arg-type]  # no process needed
    warming = spare.warming(3)
    assert warming is not None and (warming.phase, warming.attempt) == ("importing", 3)
    assert warming.label() == "importing torch and DeepSpeed"
    spare.ready = True  # it said ready: the trainer says its own phases from here on
    assert spare.warming(3) is None


def test_a_failed_warm_up_is_raised_in_the_main_thread() -> None:
    def broken() -> None:
        raise ImportError("no deepspeed here")

    with pytest.raises(ImportError, match="no deepspeed here"):
        warm_aside(broken)


def test_the_openmp_wait_policy_is_the_users_own() -> None:
    assert OMP_WAIT_ENV not in trainer_environment({}, ranks=1)  # no default: it halves CPU throughput
    assert trainer_environment({OMP_WAIT_ENV: "PASSIVE"}, ranks=2)[OMP_WAIT_ENV] == "PASSIVE"


@pytest.mark.slow
async def test_the_trainer_leaves_a_core_to_a_spare_while_it_warms_up(tmp_path: Path) -> None:
    """``share(1)`` before the spare starts, ``share(0)`` once it says ready (a spare that
    dies or is taken ends the share the same way): the trainer's threads would otherwise
    wait on the core the spare's imports take (engine.trainer.core_share)."""
    (tmp_path / "logs").mkdir()
    shares: list[int] = []
    # a spare that warms up for a moment, says ready, then waits for orders on stdin
    spare_cmd = ["sh", "-c", 'sleep 0.3; printf "ready\\n"; read orders', "spare"]
    with Store(tmp_path / "store.sqlite") as store:
        standby = Standby(RunDir(tmp_path), spare_cmd, Journal(store, Consoles()), shares.append)
        spare = await standby._start()
        assert spare is not None and shares == [1]
        watching = asyncio.create_task(standby._watch(spare))
        await until(
            lambda: shares == [1, 0], what="the share ended once the spare was ready", seen=lambda: shares
        )
        standby._spare = spare
        await standby.close()
        await watching
    assert shares[:2] == [1, 0] and set(shares[2:]) <= {0}


def test_core_share_leaves_cores_at_the_boundary_and_takes_them_back() -> None:
    calls: list[int] = []
    share = CoreShare(2, calls.append, enabled=True)
    share.at_boundary(0)
    assert calls == []  # nothing asked: torch's threads untouched
    share.at_boundary(1)
    share.at_boundary(1)
    assert calls == [1]  # once per change
    share.at_boundary(0)
    assert calls == [1, 2]
    alone = CoreShare(1, calls.append, enabled=True)
    alone.at_boundary(1)
    assert calls[-1] == 1  # never below one thread
    gpu = CoreShare(8, calls.append, enabled=False)
    gpu.at_boundary(1)
    assert calls == [1, 2, 1]  # a GPU's trainer ignores it
