"""The base of every console panel: it draws a ``RunView`` snapshot, nothing else.

A panel never reads the socket or the store; the app folds messages into a new
``RunView`` and calls ``show`` on each panel at most a few times a second.

A panel is a bordered box holding a body (figures, ``height: auto``) and, for panels with
a history, a ``ChartView`` below it. They are separate widgets so that a new step repaints
only the few lines of figures; the chart, most of the box, is redrawn at the slower chart
rate the app asks for (``show(..., charts=True)``). Repainting, not building the markup, is
what an attached console spends its CPU on, so a panel's border title is set anew only
when its text changes (``SteadyTitle``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from textual.app import ComposeResult
from textual.widget import Widget

from memtui.console.run_view import RunView
from memtui.console.widgets.chart_view import ChartView
from memtui.console.widgets.lines_view import LinesView

TEXTUAL_TITLE: Any = Widget.__dict__["border_title"]
"""Textual's own ``border_title`` descriptor (read from the class dict: through the class,
its getter would answer for no widget)."""


class SteadyTitle:
    """``border_title`` that repaints only when the title changes.

    Textual's setter refreshes the whole widget on every assignment, equal or not; a panel
    that sets its title from each ``draw`` (a count, the memory's kind) would repaint its
    whole box, chart and all, at every redraw. Here an unchanged title is a no-op."""

    def __get__(self, obj: Widget | None, objtype: type | None = None) -> Any:
        return self if obj is None else TEXTUAL_TITLE.__get__(obj, objtype)

    def __set__(self, obj: Widget, title: str | None) -> None:
        if obj.__dict__.get("_steady_title", ...) != title:
            obj.__dict__["_steady_title"] = title
            TEXTUAL_TITLE.__set__(obj, title)


class Panel(Widget):
    """A bordered box that renders a view with pure functions: ``draw`` and ``draw_chart``."""

    DEFAULT_CSS = """
    Panel {
        border: round $panel-lighten-2;
        border-title-color: $text-primary;
        padding: 0 1;
        width: 100%;
        height: 100%;
        layout: vertical;
        overflow: hidden hidden;
    }
    /* The focused panel (the one z maximises, whose cursor keys move): a heavy box and a
       reversed title, seen without colour too (the ansi theme, a monochrome terminal). */
    Panel:focus { border: heavy $primary; border-title-style: reverse bold; }
    Panel > .panel-body {
        width: 100%;
        height: auto;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    """
    border_title = SteadyTitle()
    can_focus = True
    """Focus picks the panel to maximise (and the directives list's cursor)."""
    HAS_CHART = False
    """Compose a ``ChartView`` under the body and fill it from ``draw_chart``."""

    def __init__(self, *, title: str = "", id: str | None = None) -> None:
        super().__init__(id=id)
        self.border_title = title
        self.body = LinesView(classes="panel-body")
        """The figures: the lines that changed are redrawn whenever the view changes."""
        self.chart: ChartView | None = ChartView() if self.HAS_CHART else None
        """The history chart, if any: redrawn at the chart rate."""
        self._view: RunView | None = None
        self._now = 0.0
        self._content = ""

    def compose(self) -> ComposeResult:
        yield self.body
        if self.chart is not None:
            yield self.chart

    def show(self, view: RunView, now: float, *, charts: bool = True) -> None:
        """Redraw from ``view`` as of ``now`` (Unix time); the chart too when ``charts``.

        Only the lines whose text changed are repainted (a layout pass only when the
        number of lines changes: ``LinesView``).
        """
        self._view, self._now = view, now
        content = self.draw(view, now)
        if content != self._content:
            self._content = content
            self.body.update(content)
        if charts and self.chart is not None:
            size = self.chart.content_size
            self.chart.show(self.draw_chart(view, now, size.width, size.height))

    @property
    def text(self) -> str:
        """The body's content markup as last drawn."""
        return self._content

    draw: Callable[[RunView, float], str]
    """Body markup for ``view`` at ``now`` (s): each panel defines it, calling its module's
    pure renderer (``__init_subclass__`` refuses a panel class without one)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not callable(getattr(cls, "draw", None)):
            raise TypeError(f"{cls.__name__}: a Panel defines draw(view, now) -> markup")

    def draw_chart(self, view: RunView, now: float, width: int, height: int) -> str:
        """Chart markup, ``height`` lines of ``width`` cells; for panels with ``HAS_CHART``."""
        return ""

    def on_resize(self) -> None:
        if self._view is not None:
            self.show(self._view, self._now)

    def on_chart_view_resized(self, message: ChartView.Resized) -> None:
        message.stop()
        self.on_resize()
