"""How often the console draws: new data after a quiet spell at once, then at most once per
REDRAW_INTERVAL_S however much arrives (what keeps an attached console's CPU low), nothing
while frozen. Counted, not timed: the interval is made far longer than the test."""

from __future__ import annotations

import math

import pytest

import memtui.console.app
from engine.run.directory import RunDir
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from tests.fakes.fake_engine import make_sample


@pytest.fixture
def slow_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memtui.console.app, "REDRAW_INTERVAL_S", 600.0)


def counting(app: MemtuiApp) -> list[bool]:
    """Replace ``app.redraw`` with one that records each call's ``charts``."""
    calls: list[bool] = []
    redraw = app.redraw

    def counted(*, charts: bool = True) -> None:
        calls.append(charts)
        redraw(charts=charts)

    app.redraw = counted  # type: ignore[method-assign]
    return calls


async def test_a_burst_draws_once_at_once_then_waits_for_the_interval(
    run_dir: RunDir, slow_redraws: None
) -> None:
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    async with app.run_test() as pilot:
        app._drawn_at = -math.inf  # never drawn: the next data draws at once
        calls = counting(app)
        view = app.view
        for step in range(1, 51):
            view = view.with_sample(make_sample(step))
            app._fold(view)
        await pilot.pause()
        assert len(calls) == 1 and app.view.step == 50  # one draw, of the newest view
        assert "50" in app._header._shown  # type: ignore[union-attr]
        app._fold(view.with_sample(make_sample(51)))
        await pilot.pause()
        assert len(calls) == 1 and app._redraw_timer is not None  # due at the end of the interval


async def test_nothing_is_drawn_while_frozen(run_dir: RunDir, slow_redraws: None) -> None:
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    async with app.run_test() as pilot:
        await pilot.press("f")
        app._drawn_at = -math.inf
        calls = counting(app)
        app._fold(app.view.with_sample(make_sample(7)))
        await pilot.pause()
        assert calls == [] and "step [b]0[/b]" in app._header._shown  # type: ignore[union-attr]
        await pilot.press("f")  # unfreezing catches up at once
        assert len(calls) == 1 and "step [b]7[/b]" in app._header._shown  # type: ignore[union-attr]
