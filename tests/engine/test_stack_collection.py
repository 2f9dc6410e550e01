"""Every rank's stacks, one rank stopped: the running rank is asked, the stopped one is continued
for its dump and stopped again; one file per rank and where each rank is; and the innermost
frame of the training code read out of faulthandler's dumps."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.run.stack_files import diagnosis_files, innermost_frame, live_stack_files
from engine.supervisor.hangs.stack_collection import collect_stacks, is_stopped
from tests.waiting import until

pytestmark = pytest.mark.timeout(120)

RANK_PROGRAM = """
import faulthandler, os, signal, sys, time
from pathlib import Path
from engine.domain import STACK_DUMP_SIGNAL
from engine.run.stack_files import open_live_stack_file
sink = open_live_stack_file(Path(sys.argv[1]), 1, int(sys.argv[2]), os.getpid())
faulthandler.register(signal.Signals[STACK_DUMP_SIGNAL], file=sink, all_threads=True)
(Path(sys.argv[1]) / f"ready-{sys.argv[2]}").touch()
def wait_in_collective_of_rank(rank):
    while True:
        signal.pause()  # as a rank blocked in a collective: woken only by a signal
wait_in_collective_of_rank(int(sys.argv[2]))
"""


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    script = tmp_path / "rank_program.py"
    script.write_text(RANK_PROGRAM)
    procs = [subprocess.Popen([sys.executable, str(script), str(tmp_path), str(r)], env=env) for r in (0, 1)]
    try:
        yield procs
    finally:
        for p in procs:
            p.kill()
            p.wait()


@pytest.mark.slow
async def test_a_stopped_rank_and_a_running_one_both_give_their_stacks(
    tmp_path: Path, ranks: list[subprocess.Popen[bytes]]
) -> None:
    pids = [p.pid for p in ranks]
    await until(lambda: len(list(tmp_path.glob("ready-*"))) == 2, what="both ranks' dump handlers")
    assert len(live_stack_files(tmp_path, 1)) == 2
    os.kill(pids[1], signal.SIGSTOP)
    await until(lambda: is_stopped(pids[1]), what="rank 1 stopped")
    collected = await collect_stacks(tmp_path, 1, pids, "heartbeat")
    assert collected.stopped == [1] and collected.silent == [] and set(collected.files) == {"0", "1"}
    for rank in ("0", "1"):
        assert collected.where[rank].endswith("rank_program.py:11 in wait_in_collective_of_rank")
        assert (tmp_path / collected.files[rank]).name.endswith(f"-rank{rank}.txt")
    await until(lambda: is_stopped(pids[1]), what="rank 1 stopped again, as it was found")
    assert not is_stopped(pids[0])
    assert [p.name for p in diagnosis_files(tmp_path)] == sorted(
        Path(f).name for f in collected.files.values()
    )


DUMP = """Thread 0x00007f01 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait
  File "/x/site-packages/deepspeed/runtime/engine.py", line 2000 in backward

Current thread 0x00007f00 (most recent call first):
  File "/x/site-packages/torch/distributed/distributed_c10d.py", line 2500 in all_reduce
  File "/x/site-packages/deepspeed/runtime/engine.py", line 2100 in allreduce_gradients
  File "/repo/engine/trainer/loop.py", line 236 in train_step
  File "/repo/engine/trainer/loop.py", line 200 in run_steps
"""


def test_where_a_rank_is_is_the_innermost_frame_of_the_training_code() -> None:
    assert innermost_frame(DUMP) == "engine/trainer/loop.py:236 in train_step"
    installed = DUMP.replace("/repo/engine", "/x/site-packages/engine")
    assert innermost_frame(installed) == "engine/trainer/loop.py:236 in train_step"
    assert innermost_frame("Fatal Python error: nothing") is None
    deeper = DUMP.replace(
        "/repo/engine/trainer/loop.py", "/home/memtui/repo/engine/trainer/ranks/rank_group.py"
    )
    assert (
        innermost_frame(deeper) == "engine/trainer/ranks/rank_group.py:236 in train_step"
    )  # a sub-package's
    user = DUMP.replace("/repo/engine/trainer/loop.py", "/home/me/models/gpt/workload.py")
    assert innermost_frame(user) == "models/gpt/workload.py:236 in train_step"
