"""The chart area of a panel: lines of block characters under the panel's figures.

Only holds and paints markup; the panel renders it with a pure function at the chart rate.
Rows whose markup did not change (the rule, bands of full blocks) are not repainted.
"""

from __future__ import annotations

from textual.message import Message

from memtui.console.widgets.lines_view import LinesView


class ChartView(LinesView):
    """Fills the rest of its panel; repainted only when its markup changes."""

    DEFAULT_CSS = """
    ChartView {
        width: 100%;
        height: 1fr;
        text-wrap: nowrap;
        text-overflow: clip;
    }
    """

    def __init__(self) -> None:
        super().__init__(classes="panel-chart")
        self._markup = ""

    @property
    def text(self) -> str:
        """The markup last shown."""
        return self._markup

    def show(self, markup: str) -> None:
        if markup != self._markup:
            self._markup = markup
            self.update(markup, layout=False)

    class Resized(Message):
        """The chart's size changed (e.g. the figures above it grew): its panel redraws it."""

    def on_resize(self) -> None:
        self.post_message(self.Resized())
