"""What an OOM leaves in the run's directory, tested on the CPU: the CUDA path against a fake
``torch.cuda.memory`` (the calls made, the snapshot written and pruned), the CPU path for
real (a breakdown with the plan's parts and the measured figures, no CUDA call)."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from engine.events import PlannedMemory
from engine.run.oom_files import read_breakdowns
from engine.trainer.memory.oom_forensics import INACTIVE_SPLIT, OomForensics
from engine.trainer.ranks.rank_group import RankGroup

GIB = 1 << 30
PLANNED = PlannedMemory(
    params=GIB, grads=GIB, optimizer=4 * GIB, activations_per_sample=GIB // 8, margin=GIB // 2,
    micro_batch=8, planned_peak=7 * GIB,
)  # fmt: skip


class FakeCudaMemory:
    """Stands in for ``torch.cuda.memory``'s history and snapshot calls and the allocator's
    figures; every call is noted in ``calls``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[tuple[str, Any]] = []
        memory = torch.cuda.memory
        monkeypatch.setattr(memory, "_record_memory_history", self.record, raising=True)
        monkeypatch.setattr(memory, "_dump_snapshot", self.dump, raising=True)
        monkeypatch.setattr(torch.cuda, "memory_stats", lambda device=None: {INACTIVE_SPLIT: 3 * GIB})
        monkeypatch.setattr(torch.cuda, "memory_allocated", lambda device=None: 60 * GIB)
        monkeypatch.setattr(torch.cuda, "memory_reserved", lambda device=None: 70 * GIB)

    def record(self, **kwargs: Any) -> None:
        self.calls.append(("record", kwargs))

    def dump(self, filename: str) -> None:
        self.calls.append(("dump", filename))
        Path(filename).write_bytes(pickle.dumps({"segments": [], "device_traces": [[]]}))


def memory_at_oom(kind: str, world: int = 1, zero_stage: int = 2) -> Any:
    """What AdaptiveMemory holds at an OOM, as plain values."""
    engine = SimpleNamespace(zero_optimization_stage=lambda: zero_stage)
    device = torch.device("cuda" if kind == "cuda" else "cpu")
    return SimpleNamespace(
        engine=engine,
        probe=SimpleNamespace(kind=kind, device=device),
        ranks=RankGroup(0, world),
        ballast=SimpleNamespace(held=GIB),
        budget=72 * GIB,
        predicted=65 * GIB,
        fragmented=2 * GIB,
    )


def oom(
    forensics: OomForensics, memory: Any, step: int, before: int = 8, after: int | None = 4
) -> Path | None:
    err = torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return forensics.record(memory, step, before, after, err, peak=71 * GIB, baseline=7 * GIB)


def test_cuda_history_is_recorded_and_each_oom_dumps_a_snapshot_the_newest_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCudaMemory(monkeypatch)
    forensics = OomForensics(tmp_path, 2, torch.device("cuda"), history_entries=100_000, snapshots_kept=2)
    assert fake.calls == [("record", {"max_entries": 100_000})]  # at start, before any OOM

    memory = memory_at_oom("cuda")
    for step in (10, 11, 12):
        oom(forensics, memory, step)
    dumps = [arg for name, arg in fake.calls if name == "dump"]
    assert len(dumps) == 3 and all(arg.endswith(".pickle.partial") for arg in dumps)  # then renamed
    assert sorted(p.name for p in tmp_path.glob("*.pickle")) == [
        "step-00000011-attempt-2-mb-8.pickle",
        "step-00000012-attempt-2-mb-8.pickle",
    ]  # the oldest pruned
    assert not list(tmp_path.glob("*.partial"))
    found = read_breakdowns(tmp_path)
    assert [b.step for _, b in found] == [10, 11, 12]  # every breakdown kept (small)
    newest = found[-1][1]
    assert newest.snapshot == "step-00000012-attempt-2-mb-8.pickle"
    assert newest.allocator == {"allocated": 60 * GIB, "reserved": 70 * GIB, "inactive_split": 3 * GIB}
    assert (newest.mem_kind, newest.outcome, newest.micro_batch_before, newest.micro_batch_after) == (
        "cuda",
        "redone",
        8,
        4,
    )
    assert "OutOfMemoryError: CUDA out of memory" in newest.error


def test_history_off_makes_no_history_call_and_writes_no_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCudaMemory(monkeypatch)
    forensics = OomForensics(tmp_path, 1, torch.device("cuda"), history_entries=0)
    oom(forensics, memory_at_oom("cuda"), 5)
    assert fake.calls == []
    assert not list(tmp_path.glob("*.pickle"))
    ((_, breakdown),) = read_breakdowns(tmp_path)
    assert breakdown.snapshot is None and breakdown.allocator is not None


def test_on_the_cpu_the_breakdown_holds_the_plan_and_the_measured_figures(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = FakeCudaMemory(monkeypatch)
    forensics = OomForensics(tmp_path, 1, torch.device("cpu"), history_entries=100_000, planned=PLANNED)
    path = oom(forensics, memory_at_oom("cpu-rss"), 7, before=8, after=None)
    assert fake.calls == []  # the CPU has no allocator history: the setting is ignored
    assert path is not None and path.name == "step-00000007-attempt-1-mb-8.json"
    written = json.loads(path.read_text())
    assert written["planned"]["optimizer"] == 4 * GIB and written["planned_activations"] == GIB
    assert (written["baseline"], written["step_peak"], written["ballast"]) == (7 * GIB, 71 * GIB, GIB)
    assert (written["budget"], written["predicted"], written["mem_kind"]) == (72 * GIB, 65 * GIB, "cpu-rss")
    assert written["outcome"] == "halted" and written["allocator"] is None


def test_an_oom_at_zero3_or_on_several_ranks_is_named_as_a_restart(tmp_path: Path) -> None:
    forensics = OomForensics(tmp_path, 1, torch.device("cpu"))
    first = oom(forensics, memory_at_oom("cpu-rss", zero_stage=3), 3)
    ranked = oom(forensics, memory_at_oom("cpu-rss", world=2), 4)
    assert (
        first is not None and ranked is not None and ranked.name == "step-00000004-attempt-1-mb-8-rank-0.json"
    )
    assert [b.outcome for _, b in read_breakdowns(tmp_path)] == ["restart", "restart"]


def test_a_directory_that_cannot_be_written_does_not_stop_the_recovery(tmp_path: Path) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")  # a file where the directory should be
    assert oom(OomForensics(blocked / "oom", 1, torch.device("cpu")), memory_at_oom("cpu-rss"), 3) is None


def test_a_step_that_runs_out_twice_keeps_both_breakdowns(tmp_path: Path) -> None:
    forensics = OomForensics(tmp_path, 1, torch.device("cpu"))
    oom(forensics, memory_at_oom("cpu-rss"), 5, before=8, after=4)
    oom(forensics, memory_at_oom("cpu-rss"), 5, before=4, after=2)  # redone smaller, out again
    found = [(b.step, b.micro_batch_before, b.micro_batch_after) for _, b in read_breakdowns(tmp_path)]
    assert found == [(5, 8, 4), (5, 4, 2)]
