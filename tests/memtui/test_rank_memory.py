"""Per-rank memory: the view keeps the newest rank report between the steps that carry one,
the memory panel draws one row per rank (or the worst rank's line where there is no room),
a single-rank run shows none, and no link on the way (supervisor outbox, the console's
folding) loses a report to coalescing."""

from __future__ import annotations

import asyncio
from typing import Any

from textual.content import Content

from engine.domain import RankMemory
from engine.run.directory import RunDir
from engine.supervisor.channel.console_outbox import ConsoleClient
from engine.wire.protocol import PROTOCOL_VERSION, Hello, Telemetry, decode_server
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.widgets.memory_panel import MemoryPanel, memory_title, render_memory, worst_rank
from tests.fakes.run_script import make_ranks, make_sample
from tests.fakes.scripted_engine import ScriptedEngine, telemetry, welcome_for
from tests.memtui.console_harness import text_of
from tests.waiting import until

MIB = 2**20
GIB = 2**30


def plain(markup: str) -> str:
    return Content.from_markup(markup).plain


def words(line: str) -> str:
    """``line`` with runs of spaces as one (columns are padded to align)."""
    return " ".join(line.split())


def two_ranks(step: int = 4, **over: Any) -> list[RankMemory]:
    ranks = make_ranks(make_sample(step, mem_kind="cuda"), 2)
    return [r.model_copy(update=over) if r.rank == 1 else r for r in ranks]


def ranked_view(ranks: list[RankMemory], height: int = 15) -> RunView:
    return RunView().with_sample(make_sample(4, world_size=len(ranks), ranks=ranks, mem_kind="cuda"))


def test_view_keeps_the_newest_rank_report_between_reports() -> None:
    view = RunView().with_sample(make_sample(4, world_size=2, ranks=two_ranks()))
    assert [r.rank for r in view.ranks] == [0, 1] and view.ranks_step == 4
    later = view.with_sample(make_sample(5, world_size=2)).with_sample(make_sample(6, world_size=2))
    assert later.step == 6 and later.ranks == view.ranks and later.ranks_step == 4
    newer = two_ranks(8, reserved=1900 * MIB)
    reported = later.with_sample(make_sample(8, world_size=2, ranks=list(reversed(newer))))
    assert reported.ranks_step == 8 and reported.ranks[1].reserved == 1900 * MIB
    assert [r.rank for r in reported.ranks] == [0, 1]  # rank order, whatever order they came in
    single = reported.with_sample(make_sample(9))  # resumed on one rank
    assert single.ranks == () and single.ranks_step is None


def test_single_rank_panel_has_no_rank_rows() -> None:
    view = RunView().with_sample(make_sample(4, mem_kind="cuda"))
    for width, height in ((36, 6), (58, 19)):
        text = plain(render_memory(view, width, height))
        assert "rank" not in text and "r0" not in text and "worst" not in text
    assert memory_title(view) == "Memory · CUDA device memory"


def test_wide_panel_draws_a_row_per_rank_with_bars_peak_and_gap() -> None:
    ranks = two_ranks(allocated=1500 * MIB, reserved=1700 * MIB, peak=1800 * MIB, capacity=2 * GIB)
    view = ranked_view(ranks)
    lines = plain(render_memory(view, 58, 19)).splitlines()
    header = next(line for line in lines if line.startswith("rank"))
    assert "reserved" in header and "peak" in header and "gap" in header
    r0, r1 = (next(line for line in lines if line.startswith(f"r{i} ")) for i in (0, 1))
    assert words(r0).endswith("420 MiB 21% 450 MiB 120 MiB") and "█" in r0 and "░" in r0
    assert words(r1).endswith("1.66 GiB 83% 1.76 GiB 200 MiB") and "▒" in r1
    assert memory_title(view) == "Memory · CUDA device memory · 2 ranks"
    assert worst_rank(view.ranks).rank == 1
    later = view.with_sample(make_sample(view.step + 3, world_size=2, mem_kind="cuda"))
    assert memory_title(later) == f"Memory · CUDA device memory · 2 ranks at step {view.step}"
    cpu = (
        RunView()
        .with_sample(make_sample(4, world_size=2, ranks=ranks))
        .with_sample(make_sample(9, world_size=2))
    )
    assert (
        memory_title(cpu, 58) == "Memory · RSS, CPU stand-in · 2 ranks at step 4"
    )  # the long label would not fit


def test_narrow_panel_drops_the_gap_column_before_the_bar() -> None:
    lines = plain(render_memory(ranked_view(two_ranks()), 38, 15)).splitlines()
    header = next(line for line in lines if line.startswith("rank"))
    assert "peak" in header and "gap" not in header.split("reserved")[1]
    assert any(line.startswith("r1 ") and "█" in line for line in lines)


def test_compact_panel_names_the_worst_rank_in_one_line() -> None:
    ranks = two_ranks(peak=1950 * MIB, reserved=1900 * MIB, capacity=2 * GIB)
    lines = plain(render_memory(ranked_view(ranks), 36, 6)).splitlines()
    assert len(lines) == 6 and lines[-1].startswith("2 ranks   worst r1 ")
    assert words(lines[-1]).endswith("1.86 GiB 93%")


def test_rank_rows_show_each_ranks_own_step_time_and_mark_the_slowest() -> None:
    ranks = [r.model_copy(update={"step_s": s}) for r, s in zip(two_ranks(), (0.12, 0.61), strict=True)]
    lines = plain(render_memory(ranked_view(ranks), 68, 19)).splitlines()
    header = next(line for line in lines if line.startswith("rank"))
    r0, r1 = (next(line for line in lines if line.startswith(f"r{i} ")) for i in (0, 1))
    assert header.rstrip().endswith("step") and "peak" in header
    assert r0.rstrip().endswith("0.120s") and r1.rstrip().endswith("0.610s ◀")
    compact = plain(render_memory(ranked_view(ranks), 44, 6)).splitlines()[-1]
    assert compact.startswith("2 ranks   slow r1 worst r1 ")


def test_many_ranks_show_the_worst_ones_and_how_many_are_not_shown() -> None:
    base = make_sample(4, mem_kind="cuda")
    ranks = [
        RankMemory(rank=r, allocated=GIB, reserved=GIB, peak=(1 + (r == 5)) * GIB, capacity=4 * GIB)
        for r in range(8)
    ]
    view = RunView().with_sample(base.model_copy(update={"world_size": 8, "ranks": ranks}))
    lines = plain(render_memory(view, 58, 7 + 4 + 3)).splitlines()  # room for a header and 3 rows
    assert "+5 more" in lines[7] and sum(line.startswith("r") for line in lines[8:]) == 3
    assert any(line.startswith("r5 ") for line in lines[8:])  # the worst is always among them


async def test_the_console_never_drops_a_rank_report(run_dir: RunDir) -> None:
    """Every sample is folded as it arrives (none replaced by a newer one in a queue), so the
    ranks' report stays shown over the samples after it that carry none."""

    def received(step: int, ranks: list[RankMemory] | None = None) -> Telemetry:
        return Telemetry(sample=make_sample(step, world_size=2, ranks=ranks), state="running")

    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    async with app.run_test():
        for message in (received(4, two_ranks()), received(5), received(6)):
            app._relay(message)
        assert app.view.step == 6 and app.view.ranks_step == 4 and len(app.view.ranks) == 2


class _Writer:
    """Just enough of a StreamWriter for the supervisor's console outbox."""

    def __init__(self) -> None:
        self.lines: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.lines.append(data)

    async def drain(self) -> None:
        await asyncio.sleep(0)


async def test_supervisor_coalescing_carries_a_rank_report_onto_the_newer_sample() -> None:
    writer = _Writer()
    hello = Hello(protocol=PROTOCOL_VERSION, role="console", telemetry=True)
    client = ConsoleClient(writer, hello)  # type: ignore[arg-type]
    try:
        client.offer_telemetry(make_sample(3, world_size=2), "running")  # goes out at once
        await until(lambda: len(writer.lines) == 1)
        client.offer_telemetry(make_sample(4, world_size=2, ranks=two_ranks()), "running")
        client.offer_telemetry(make_sample(5, world_size=2), "running")  # replaces step 4 in the slot
        await until(lambda: len(writer.lines) == 2)
        sent = decode_server(writer.lines[-1])
        assert isinstance(sent, Telemetry) and sent.sample.step == 5 and sent.coalesced == 1
        assert sent.sample.ranks == two_ranks()
    finally:
        client.closed = True
        client._pump_task.cancel()


async def test_console_shows_both_ranks_of_a_two_rank_run(live_run: RunDir) -> None:
    samples = [make_sample(step, mem_kind="cuda", world_size=2) for step in range(1, 8)]
    samples = [s.model_copy(update={"ranks": make_ranks(s, 2) if s.step == 4 else None}) for s in samples]
    stream = telemetry(samples)  # the ranks' memory every fourth step, as a two-rank run reports it
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), stream=stream) as fake:
        app = MemtuiApp(live_run)
        async with app.run_test(size=(160, 48)) as pilot:
            await until(lambda: app.view.step == 7)
            assert app.view.ranks_step == 4 and len(app.view.ranks) == 2  # reported on step 4 only
            memory = app.query_one(MemoryPanel)
            await until(lambda: "2 ranks" in str(memory.border_title))
            text = text_of(memory)
            assert "r0   " in text and "r1   " in text and "peak" in text
            await pilot.resize_terminal(80, 24)
            await until(lambda: "2 ranks   worst r1" in text_of(memory))  # compact: one line for all
            assert "r0   " not in text_of(memory)
    assert fake.hellos
