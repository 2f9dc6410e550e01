"""NCCL's flight recorder: a CUDA trainer sets it in its own environment before it joins its
process group, dumping into the run directory; never off CUDA (the decision is torch's, not
a device file's); a user's own values win."""

from __future__ import annotations

import inspect
from pathlib import Path

from engine.run.flight_recorder import TRACE_ENTRIES, flight_recorder_env
from engine.run.stack_files import diagnosis_files


def test_a_cuda_trainer_records_its_collectives_into_the_run_dir(tmp_path: Path) -> None:
    env = flight_recorder_env({"TORCH_NCCL_DUMP_ON_TIMEOUT": "0"}, tmp_path, cuda=True)
    assert env["TORCH_NCCL_TRACE_BUFFER_SIZE"] == str(TRACE_ENTRIES)
    assert "TORCH_NCCL_DUMP_ON_TIMEOUT" not in env  # the user's own choice stays
    prefix = Path(env["TORCH_NCCL_DEBUG_INFO_TEMP_FILE"])
    assert prefix.parent == tmp_path / "flight" and prefix.parent.is_dir()
    (prefix.parent / f"{prefix.name}1").write_bytes(b"pickled trace")  # as torch names rank 1's dump
    assert [p.name for p in diagnosis_files(tmp_path)] == [f"{prefix.name}1"]


def test_no_recorder_off_cuda(tmp_path: Path) -> None:
    assert flight_recorder_env({}, tmp_path, cuda=False) == {}
    assert not (tmp_path / "flight").exists()


def test_the_trainer_arms_it_from_torch_before_it_joins_the_process_group() -> None:
    from engine.trainer import loop

    source = inspect.getsource(loop._train)
    armed = source.index("flight_recorder_env(os.environ, run.path, torch.cuda.is_available())")
    assert armed < source.index("build_engine(config, workload)")  # which joins the group
