"""The base of every console panel: it draws a ``RunView`` snapshot, nothing else.

A panel never reads the socket or the store; the app folds messages into a new
``RunView`` and calls ``show`` on each panel at most ~10 times a second.
"""

from __future__ import annotations

from textual.widgets import Static

from memtui.run_view import RunView


class Panel(Static):
    """A bordered box that renders a view with a pure function."""

    DEFAULT_CSS = """
    Panel {
        border: round $panel-lighten-2;
        border-title-color: $text-primary;
        padding: 0 1;
        width: 100%;
        height: 100%;
        text-wrap: nowrap;
        text-overflow: ellipsis;
    }
    Panel:focus { border: round $primary; }
    """
    can_focus = True
    """Focus picks the panel to maximise (and the directives list's cursor)."""

    def __init__(self, *, title: str = "", id: str | None = None) -> None:
        super().__init__(id=id, markup=True)
        self.border_title = title
        self._view: RunView | None = None
        self._now = 0.0
        self._content = ""

    def show(self, view: RunView, now: float) -> None:
        """Redraw from ``view`` as of ``now`` (Unix time); nothing to do if the text is unchanged."""
        self._view, self._now = view, now
        content = self.draw(view, now)
        if content != self._content:
            self._content = content
            self.update(content, layout=False)  # the grid fixes our size: no layout pass

    def draw(self, view: RunView, now: float) -> str:
        """Content markup for ``view``; subclasses call their module's pure renderer."""
        raise NotImplementedError

    def on_resize(self) -> None:
        if self._view is not None:
            self.show(self._view, self._now)
