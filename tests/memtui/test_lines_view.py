"""Repainting line by line: the screen after a step that changed a few lines is, cell for cell,
the screen a fresh console draws of the same view; only the changed lines are rendered again;
a change in the number of lines, a resize, a new theme and a text selection render the whole
text (the last as ``Static`` draws it)."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.geometry import Offset
from textual.selection import Selection
from textual.strip import Strip
from textual.widgets import Static

from engine.run.directory import RunDir
from memtui.console.app import MemtuiApp
from memtui.console.run_view import RunView
from memtui.console.widgets.lines_view import LinesView
from memtui.theming import load_theme
from tests.fakes.run_script import T0, make_sample

NOW = T0 + 30.0


def stepped(view: RunView, first: int, last: int) -> RunView:
    """``view`` after steps first..last, each changing the loss, the rate and the memory."""
    for step in range(first, last + 1):
        view = view.with_sample(
            make_sample(
                step,
                ts=T0 + step,
                loss=5.5 - step * 0.37,
                tokens_per_s=20_000.0 + 731 * step,
                mem_allocated=300 * 2**20 + step * 7 * 2**20,
                grad_norm=0.8 + step * 0.01,
            ),
            T0 + step,
        )
    return view


async def screen_of(run_dir: RunDir, views: list[RunView], size: tuple[int, int]) -> str:
    """The screen (SVG) after drawing each of ``views`` in turn."""
    app = MemtuiApp(run_dir, live=False, view=views[0], clock=lambda: NOW)
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        for view in views:
            app.view = view
            app.main.redraw()
            await pilot.pause()
        return app.export_screenshot()


async def test_a_step_drawn_over_the_last_one_matches_a_fresh_draw(run_dir: RunDir) -> None:
    first = stepped(RunView(run_id="r", state="running", connection="connected", target_steps=100), 1, 3)
    later = stepped(first, 4, 9)
    for size in ((120, 40), (80, 24)):
        over = await screen_of(run_dir, [first, later], size)
        assert over == await screen_of(run_dir, [later], size)
        assert over != await screen_of(run_dir, [first], size)  # the step changed what is shown


async def themed(run_dir: RunDir, view: RunView, theme: str, then: str | None = None) -> str:
    """The screen of ``view`` in ``theme`` (switched to ``then`` after the first draw)."""
    app = MemtuiApp(run_dir, live=False, view=view, clock=lambda: NOW, theme_name=theme)
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.pause()
        if then is not None:
            app.theme = load_theme(then).name
            await pilot.pause()
        return app.export_screenshot()


async def test_a_new_theme_repaints_every_line(run_dir: RunDir) -> None:
    view = stepped(RunView(run_id="r", state="running", connection="connected", target_steps=100), 1, 5)
    switched = await themed(run_dir, view, "ansi", then="dark")
    assert switched == await themed(run_dir, view, "dark")
    assert switched != await themed(run_dir, view, "ansi")


class Lines(App[None]):
    def __init__(self, widget: type[Static] = LinesView) -> None:
        super().__init__()
        self.widget = widget

    def compose(self) -> ComposeResult:
        yield self.widget(id="lines")


def rendered_lines(view: LinesView) -> list[int]:
    """Record the content lines ``view`` renders from markup from now on."""
    seen: list[int] = []
    render_one = view._render_one

    def counted(y: int) -> Strip:
        seen.append(y)
        return render_one(y)

    view._render_one = counted  # type: ignore[method-assign]
    return seen


async def test_only_the_changed_lines_are_rendered_again() -> None:
    app = Lines()
    async with app.run_test(size=(40, 10)) as pilot:
        view = app.query_one(LinesView)
        view.update("[b]a[/b] 1\nb 1\n[$text-muted]c[/] 1")
        await pilot.pause()
        seen = rendered_lines(view)
        view.update("[b]a[/b] 1\nb 2\n[$text-muted]c[/] 1")
        await pilot.pause()
        assert seen == [1] and str(view.visual) == "a 1\nb 2\nc 1"
        view.update("a\nb\nc\nd")  # one line more: a layout, every line again
        await pilot.pause()
        assert sorted(seen[1:]) == [0, 1, 2, 3] and view.size.height == 4
        del seen[:]
        await pilot.resize_terminal(30, 10)
        await pilot.pause()
        assert sorted(seen) == [0, 1, 2, 3]


async def selected(widget: type[Static]) -> str:
    """The screen of ``widget`` showing two lines, the second changed, part of both selected."""
    app = Lines(widget)
    async with app.run_test(size=(40, 6)) as pilot:
        view = app.query_one("#lines", Static)
        view.update("alpha one\nbeta two")
        await pilot.pause()
        app.screen.selections = {view: Selection.from_offsets(Offset(2, 0), Offset(4, 1))}
        await pilot.pause()
        view.update("alpha one\nbeta three")
        await pilot.pause()
        return app.export_screenshot()


async def test_a_text_selection_is_drawn_as_static_draws_it() -> None:
    assert await selected(LinesView) == await selected(Static)
