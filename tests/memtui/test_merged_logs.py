"""``memtui logs`` by default: the supervisor's and every trainer attempt's lines in time order,
each marked with its log; a traceback stays under the line it belongs to."""

from __future__ import annotations

import io

import pytest

from engine.run.directory import RunDir
from memtui.cli.inspection.merged_logs import follow_merged, line_time
from memtui.cli.main import main

SUPERVISOR = """\
2026-11-30 19:21:33,701 INFO engine.supervisor.journal: event 1 run_started
2026-11-30 19:21:33,723 INFO engine.supervisor.journal: event 3 trainer_launched
2026-11-30 19:21:37,440 INFO engine.supervisor.journal: event 5 startup_phase building
2026-11-30 19:23:40,100 INFO engine.supervisor.journal: event 9 trainer_exited
"""
TRAINER = """\
2026-11-30 19:21:34,208 INFO engine.trainer.startup: start-up at 0.0 s: importing
[2026-11-30 19:21:36,688] [WARNING] [real_accelerator.py:213:get_accelerator] Setting accelerator to CPU.
2026-11-30 19:23:39,000 ERROR engine.trainer: it failed
Traceback (most recent call last):
  File "x.py", line 1, in <module>
"""


def test_lines_merge_in_time_order_marked_with_their_log(
    run_dir: RunDir, capsys: pytest.CaptureFixture[str]
) -> None:
    run_dir.supervisor_log.write_text(SUPERVISOR)
    run_dir.trainer_log(1).write_text(TRAINER)
    assert main(["logs", run_dir.run_id, "-n", "100"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(" | ")[0].strip() for line in lines] == [
        "supervisor",
        "supervisor",
        "trainer-1",
        "trainer-1",
        "supervisor",
        "trainer-1",
        "trainer-1",  # the traceback goes with its line, not to the end
        "trainer-1",
        "supervisor",
    ]
    assert lines[2] == "trainer-1  | " + TRAINER.splitlines()[0]
    assert lines[-3:-1] == [
        "trainer-1  | Traceback (most recent call last):",
        'trainer-1  |   File "x.py", line 1, in <module>',
    ]


def test_the_tail_is_of_the_merge(run_dir: RunDir, capsys: pytest.CaptureFixture[str]) -> None:
    run_dir.supervisor_log.write_text(SUPERVISOR)
    run_dir.trainer_log(1).write_text(TRAINER)
    assert main(["logs", run_dir.run_id, "-n", "2"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        'trainer-1  |   File "x.py", line 1, in <module>',
        "supervisor | " + SUPERVISOR.splitlines()[-1],
    ]


def test_follow_prints_what_every_log_gains_then_ends_with_the_supervisor(run_dir: RunDir) -> None:
    run_dir.supervisor_log.write_text(SUPERVISOR)
    out = io.StringIO()
    polls = iter([True, False])  # alive for one poll, then the supervisor is gone

    def alive() -> bool:
        if run_dir.trainer_log(2).exists() is False:  # a restart's log appears meanwhile
            run_dir.trainer_log(2).write_text("2026-11-30 19:24:00,000 INFO engine.trainer: attempt 2\n")
            with run_dir.supervisor_log.open("a") as f:
                f.write("2026-11-30 19:23:59,000 INFO engine.supervisor: restarting\n")
        return next(polls)

    follow_merged(run_dir, out, alive=alive, poll_s=0.0)
    assert out.getvalue().splitlines() == [
        "supervisor | 2026-11-30 19:23:59,000 INFO engine.supervisor: restarting",
        "trainer-2  | 2026-11-30 19:24:00,000 INFO engine.trainer: attempt 2",
    ]


def test_both_stamp_formats_are_read() -> None:
    plain, bracketed = (
        line_time("2026-11-30 19:21:33,700 INFO x"),
        line_time("[2026-11-30 19:21:33,700] [INFO] x"),
    )
    assert plain is not None and plain == bracketed
    assert line_time("  File x") is None
