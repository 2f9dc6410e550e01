"""What an attempt that ran out of memory left in memory.json, as the supervisor reads it."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.supervisor.trainers.trainer_process import geometry_note


def test_the_note_of_this_attempt_is_read_and_an_older_one_is_not(home: Path) -> None:
    run = RunDir.create(build_run_config({"name": "oom"}), home=home)
    assert geometry_note(run, since=0) is None  # no file
    run.geometry_file.write_text(json.dumps({"micro_batch": 4, "reason": "OOM at rank 1 of 2 in step 14"}))
    assert geometry_note(run, since=time.time() - 60) == "OOM at rank 1 of 2 in step 14"
    old = time.time() - 3600
    os.utime(run.geometry_file, (old, old))  # left by an earlier attempt
    assert geometry_note(run, since=time.time() - 60) is None
    run.geometry_file.write_text("{not json")
    assert geometry_note(run, since=0) is None
