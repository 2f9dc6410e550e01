"""The memory panel shows the allocator's fragmentation (CUDA) in bytes and as the share of
the reserved bytes the fragmentation alert judges; the CPU stand-in shows none."""

from __future__ import annotations

from memtui.console.run_view import RunView
from memtui.console.widgets.memory_panel import render_memory
from tests.fakes.run_script import make_sample

GIB = 1 << 30


def test_fragmentation_is_shown_with_its_share_of_the_reserved_bytes() -> None:
    sample = make_sample(
        4, mem_kind="cuda", mem_capacity=80 * GIB, mem_reserved=8 * GIB, mem_fragmentation=2 * GIB
    )
    assert "fragmented[/] 2.00 GiB (25% of reserved)" in render_memory(RunView().with_sample(sample), 100)


def test_the_cpu_stand_in_shows_no_fragmentation() -> None:
    sample = make_sample(4, mem_kind="cpu-rss", mem_fragmentation=None)
    assert "fragmented" not in render_memory(RunView().with_sample(sample), 100)
