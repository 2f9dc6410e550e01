"""The main screen at 80x24, pixel for pixel, against the fake engine with fixed data and a fixed clock.

Update after an intended change: ``pytest tests/memtui/test_console_snapshot.py --snapshot-update``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.domain import build_run_config
from engine.rundir import RunDir
from memtui.app import MemtuiApp
from tests.fakes.fake_engine import FakeEngine, make_event, make_sample

CREATED_AT = 1_700_000_000.0
NOW = CREATED_AT + 754.0  # 12m34s into the run


@pytest.fixture
def utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def fixed_run(home: Path) -> RunDir:
    run = RunDir(home / "runs" / "demo-20231114-221320-ab12")
    run.ensure_layout()
    config = build_run_config(name="demo", steps=2000).model_dump(mode="json")
    doc = {"run_id": run.run_id, "created_at": CREATED_AT, "config": config}
    run.config_file.write_text(json.dumps(doc))
    return run


def test_main_screen(home: Path, utc: None, snap_compare) -> None:  # type: ignore[no-untyped-def]
    run = fixed_run(home)
    sample = make_sample(
        240,
        ts=NOW - 0.4,
        loss=2.3456,
        grad_norm=0.734,
        loss_scale=2048.0,
        overflow_count=2,
        mem_allocated=1536 * 2**20,
        mem_reserved=1700 * 2**20,
        mem_peak=1900 * 2**20,
    )
    events = [
        make_event(1, "run_started", "run started: preset tiny, 2000 steps"),
        make_event(2, "trainer_started", "trainer attempt 1 (pid 4242)"),
        make_event(3, "loss_scale_dropped", "fp16 overflow: loss scale 4096 -> 2048", severity="warning"),
        make_event(4, "checkpoint_saved", "checkpoint step 200 (12.1 MiB, verified)"),
    ]
    with FakeEngine.in_thread(run.socket, run_id=run.run_id, events=events, telemetry=[sample]):
        app = MemtuiApp(run, clock=lambda: NOW)

        async def until_drawn(pilot) -> None:  # type: ignore[no-untyped-def]
            deadline = time.monotonic() + 5
            while not (app.view.step == 240 and app.view.last_seq == 4):
                assert time.monotonic() < deadline
                await pilot.pause(0.02)
            await pilot.pause(0.25)

        assert snap_compare(app, terminal_size=(80, 24), run_before=until_drawn)
