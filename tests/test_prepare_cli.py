"""``memtui prepare [CONFIG]``: the DeepSpeed ops a run's config needs are built (or found
built) ahead, in torch's extension cache; a default run needs none, and an op that must be
built with no compiler here is refused in one line, exit 2, with ``--json`` still one document.
Real DeepSpeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.extension_cache import EXTENSIONS_ENV

pytestmark = [pytest.mark.deepspeed]

OFFLOADED_DEEPSPEED_ADAM = """
[deepspeed_config.optimizer]
type = "AdamW"
params = { torch_adam = false }
[deepspeed_config.zero_optimization.offload_optimizer]
device = "cpu"
"""


def prepare(cache: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "memtui.cli", "prepare", *args],
        capture_output=True,
        text=True,
        env={**os.environ, EXTENSIONS_ENV: str(cache), **env},
    )


def test_a_default_run_needs_no_op_and_builds_nothing(tmp_path: Path) -> None:
    done = prepare(tmp_path / "cache", "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout) == {"ops": []}  # one JSON document, DeepSpeed's own lines on stderr
    assert not (tmp_path / "cache" / "deepspeed_shm_comm").exists()  # the inference op is declined


def test_an_op_to_build_without_a_compiler_is_refused_in_one_line(tmp_path: Path) -> None:
    config = tmp_path / "offload.toml"
    config.write_text(OFFLOADED_DEEPSPEED_ADAM)
    done = prepare(tmp_path / "cache", str(config), "--json", CXX="no-such-compiler")
    assert done.returncode == 2
    (error,) = [line for line in done.stderr.splitlines() if "cpu_adam" in line]
    assert "no C++ compiler (no-such-compiler is not on PATH)" in error and "apt install g++" in error
    assert json.loads(done.stdout) == {"ops": [], "error": error}
    assert "Traceback" not in done.stderr


def test_a_wrong_config_is_refused_with_exit_2_and_one_document(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text("[train]\nmicro_bach = 4\n")
    done = prepare(tmp_path / "cache", str(config), "--json")
    assert done.returncode == 2 and "micro_bach" in json.loads(done.stdout)["error"]


def test_prepare_has_help() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "memtui.cli", "prepare", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0 and "TORCH_EXTENSIONS_DIR" in done.stdout and "CONFIG" in done.stdout
