"""How often the console draws: new data after a quiet spell at once, then at most once per
REDRAW_INTERVAL_S however much arrives (what keeps an attached console's CPU low), nothing
while frozen; and how much: a new step repaints the figures, not the panels' whole boxes.
Counted, not timed: the interval is made far longer than the test."""

from __future__ import annotations

import math

import pytest

import memtui.console.main_screen
from engine.events import DirectiveProposed
from engine.run.directory import RunDir
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.widgets.panel import Panel
from tests.fakes.run_script import make_directive, make_event, make_sample


@pytest.fixture
def slow_redraws(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memtui.console.main_screen, "REDRAW_INTERVAL_S", 600.0)


def counting(app: MemtuiApp) -> list[bool]:
    """Replace ``app.main.redraw`` with one that records each call's ``charts``."""
    calls: list[bool] = []
    redraw = app.main.redraw

    def counted(*, charts: bool = True) -> None:
        calls.append(charts)
        redraw(charts=charts)

    app.main.redraw = counted  # type: ignore[method-assign]
    return calls


async def test_a_burst_draws_once_at_once_then_waits_for_the_interval(
    run_dir: RunDir, slow_redraws: None
) -> None:
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    async with app.run_test() as pilot:
        app.main._drawn_at = -math.inf  # never drawn: the next data draws at once
        calls = counting(app)
        view = app.view
        for step in range(1, 51):
            view = view.with_sample(make_sample(step))
            app.fold(view)
        await pilot.pause()
        assert len(calls) == 1 and app.view.step == 50  # one draw, of the newest view
        assert "50" in app.main._header._shown  # type: ignore[union-attr]
        app.fold(view.with_sample(make_sample(51)))
        await pilot.pause()
        assert len(calls) == 1 and app.main._redraw_timer is not None  # due at the end of the interval


async def test_nothing_is_drawn_while_frozen(run_dir: RunDir, slow_redraws: None) -> None:
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    async with app.run_test() as pilot:
        await pilot.press("f")
        app.main._drawn_at = -math.inf
        calls = counting(app)
        app.fold(app.view.with_sample(make_sample(7)))
        await pilot.pause()
        assert calls == [] and "step [b]0[/b]" in app.main._header._shown  # type: ignore[union-attr]
        await pilot.press("f")  # unfreezing catches up at once
        assert len(calls) == 1 and "step [b]7[/b]" in app.main._header._shown  # type: ignore[union-attr]


def whole_repaints(app: MemtuiApp) -> list[str]:
    """Record the id of each panel whose whole box (border, figures and chart) is repainted."""
    seen: list[str] = []
    for panel in app.query(Panel):
        refresh = panel.refresh

        def counted(*regions: object, _panel: Panel = panel, _refresh: object = refresh, **kw: bool) -> Panel:
            if not regions:
                seen.append(str(_panel.id))
            return _refresh(*regions, **kw)  # type: ignore[operator, no-any-return]

        panel.refresh = counted  # type: ignore[method-assign]
    return seen


async def test_a_new_step_repaints_the_figures_not_the_panels(run_dir: RunDir, slow_redraws: None) -> None:
    app = MemtuiApp(run_dir, live=False, view=RunView(run_id="r"))
    async with app.run_test(size=(120, 40)) as pilot:
        view = app.view.with_sample(make_sample(1)).with_event(make_event(1))
        app.view = view
        app.main.redraw()
        await pilot.pause()
        repainted = whole_repaints(app)
        for step in range(2, 6):  # each panel that titles itself draws its title again
            app.view = view = view.with_sample(make_sample(step))
            app.main.redraw()
            await pilot.pause()
        assert repainted == [] and "step [b]5[/b]" in app.main._header._shown  # type: ignore[union-attr]
        proposed = DirectiveProposed(directive=make_directive())
        app.view = view.with_event(make_event(2, proposed))  # a new title: "1 pending"
        app.main.redraw(charts=False)
        await pilot.pause()
        assert repainted == ["directives"]
