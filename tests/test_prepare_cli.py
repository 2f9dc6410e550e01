"""``memtui prepare``: the DeepSpeed ops a trainer loads at start are built (or found built)
ahead, in torch's extension cache, and a run then finds them there. Real DeepSpeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.extension_cache import EXTENSIONS_ENV, environment_extensions_dir

pytestmark = [pytest.mark.deepspeed, pytest.mark.timeout(900)]  # a cold build takes minutes


def test_prepare_builds_the_shared_memory_op_into_the_cache() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtui.cli", "prepare", "--json"],
        capture_output=True,
        text=True,
        env=dict(os.environ),
    )
    assert done.returncode == 0, done.stderr[-2000:]
    (op,) = json.loads(done.stdout)["ops"]  # one JSON document, DeepSpeed's own lines on stderr
    assert op["name"] == "deepspeed_shm_comm" and op["load_s"] >= 0
    cache = os.environ.get(EXTENSIONS_ENV) or environment_extensions_dir()  # the trainers' cache
    assert Path(op["directory"]) == Path(cache) / "deepspeed_shm_comm"
    assert (Path(op["directory"]) / "deepspeed_shm_comm.so").exists()  # what later runs load


def test_prepare_has_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtui.cli", "prepare", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "TORCH_EXTENSIONS_DIR" in done.stdout
