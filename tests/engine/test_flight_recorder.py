"""NCCL's flight recorder: on by default in a CUDA trainer's environment, dumping into the
run directory; never on the CPU; a user's own values win. Checked on the CPU through the
environment the launcher really gives the (fake) trainer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from engine.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.stack_files import diagnosis_files
from engine.supervisor import attempts
from engine.supervisor.flight_recorder import TRACE_ENTRIES, cuda_host, flight_recorder_env

pytestmark = pytest.mark.timeout(120)


def environ_of(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


@pytest.mark.slow
async def test_a_cuda_trainer_gets_the_flight_recorder_dumping_into_the_run_dir(
    run: RunDir, start: Any, fake_env: Any, wait_until: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCH_NCCL_TRACE_BUFFER_SIZE", raising=False)
    monkeypatch.setenv("TORCH_NCCL_DUMP_ON_TIMEOUT", "0")  # the user's own choice stays
    monkeypatch.setattr(attempts, "cuda_host", lambda environ: True)
    run.write_config(build_run_config(steps=100000))
    running = await start()
    pid = await wait_until(lambda: running.supervisor.attempts.pid, "the trainer launched")
    env = environ_of(pid)
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == str(TRACE_ENTRIES)
    assert env["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    prefix = Path(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"])
    assert prefix.parent == run.path / "flight" and prefix.parent.is_dir()
    (prefix.parent / f"{prefix.name}1").write_bytes(b"pickled trace")  # as torch names rank 1's dump
    assert [p.name for p in diagnosis_files(run.path)] == [f"{prefix.name}1"]
    running.supervisor.request_stop("test")
    assert await running.result(timeout=60) == 0


def test_no_recorder_off_cuda_and_cuda_is_a_visible_nvidia_device(tmp_path: Path) -> None:
    assert flight_recorder_env({}, tmp_path, cuda=False) == {}
    assert not (tmp_path / "flight").exists()
    device = tmp_path / "nvidia0"
    assert not cuda_host({}, device)
    device.touch()
    assert cuda_host({}, device) and cuda_host({"CUDA_VISIBLE_DEVICES": "0"}, device)
    assert not cuda_host({"CUDA_VISIBLE_DEVICES": ""}, device)
    assert not cuda_host({"CUDA_VISIBLE_DEVICES": "-1"}, device)
