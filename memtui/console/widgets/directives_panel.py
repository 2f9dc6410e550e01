"""Pending directives: what the planner asked, what the policy allows, why, and how old.

The panel keeps a cursor (↑/↓ while focused); the app's approve, clamp, reject and
details keys act on the directive under it.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.binding import Binding
from textual.markup import escape

from engine.wire.protocol import DirectiveView
from memtui.console.directive_text import render_changes, render_timing
from memtui.console.run_view import RunView
from memtui.console.widgets.panel import Panel


def render_directives(
    directives: Sequence[DirectiveView], selected: int, now: float, height: int, step: int | None = None
) -> str:
    """Two lines per directive (three under the cursor: its reasons), scrolled to the cursor;
    ``step``: the run's newest, for the steps left before each goes stale."""
    if not directives:
        return "[$text-muted]no pending directives[/]"
    blocks = [_block(d, i == selected, now, step) for i, d in enumerate(directives)]
    lines: list[str] = []
    for block in blocks[_first_visible(blocks, selected, height) :]:
        lines.extend(block)
    return "\n".join(lines)


def _block(d: DirectiveView, selected: bool, now: float, step: int | None) -> list[str]:
    mark = "[b $text-accent]▸[/]" if selected else " "
    head = f"{mark} [b]{escape(d.id)}[/b] [$text-secondary]{escape(d.source)}[/] step {d.step}"
    lines = [
        f"{head}  [$text-muted]{render_timing(d, now, step)}[/]",
        f"  {render_changes(d)}",
    ]
    if selected and d.reasons:
        lines.append(f"  [$text-muted]{escape('; '.join(d.reasons))}[/]")
    return lines


def _first_visible(blocks: list[list[str]], selected: int, height: int) -> int:
    """The first block to draw so the selected one is on screen."""
    first, used = selected, 0
    while first >= 0 and used + len(blocks[first]) <= max(1, height):
        used += len(blocks[first])
        first -= 1
    return min(selected, first + 1)


class DirectivesPanel(Panel):
    """The planner's pending directives, waiting for the operator."""

    BINDINGS = [
        Binding("up", "move(-1)", "Previous", show=False),
        Binding("down", "move(1)", "Next", show=False),
    ]

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(title="Directives", id=id)
        self.selected = 0
        """Cursor index into the view's pending directives."""

    def draw(self, view: RunView, now: float) -> str:
        count = len(view.directives)
        self.selected = max(0, min(self.selected, count - 1))
        self.border_title = f"Directives · {count} pending" if count else "Directives"
        step = view.step if view.sample else None
        return render_directives(view.directives, self.selected, now, self.content_size.height, step)

    def current(self) -> DirectiveView | None:
        """The directive under the cursor, as of the last draw."""
        pending = self._view.directives if self._view else ()
        return pending[self.selected] if 0 <= self.selected < len(pending) else None

    def action_move(self, delta: int) -> None:
        self.selected += delta
        if self._view is not None:
            self.show(self._view, self._now)
