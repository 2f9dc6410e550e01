"""Shown instead of the console while the terminal is smaller than the console can draw."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.screen import Screen
from textual.widgets import Static

MIN_WIDTH = 80
MIN_HEIGHT = 24


def render_too_small(width: int, height: int) -> str:
    return (
        f"[b]terminal too small[/b]\n{width}×{height}, the console needs {MIN_WIDTH}×{MIN_HEIGHT}\n"
        "[$text-muted]enlarge it, or q to detach[/]"
    )


class TooSmallScreen(Screen[None]):
    """A plain message; the app pops it once the terminal is big enough again."""

    DEFAULT_CSS = """
    TooSmallScreen { align: center middle; background: $background; }
    TooSmallScreen Static { width: auto; text-align: center; }
    """

    def compose(self) -> ComposeResult:
        yield Static(id="message")

    def on_mount(self) -> None:
        self.on_resize()

    def on_resize(self) -> None:
        size = self.app.size
        self.query_one("#message", Static).update(render_too_small(size.width, size.height))
