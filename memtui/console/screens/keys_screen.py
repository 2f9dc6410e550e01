"""The ``?`` overlay: every key the console answers to."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import Static

KEY_NAMES = {"question_mark": "?", "escape": "esc"}


def render_keys(keys: Sequence[tuple[str, str]]) -> str:
    """``key  description`` lines as content markup."""
    width = max((len(KEY_NAMES.get(k, k)) for k, _ in keys), default=1)
    lines = [f"[b $text-accent]{KEY_NAMES.get(k, k):>{width}}[/]  {d}" for k, d in keys]
    return "\n".join([*lines, "", "[$text-muted]esc, q or ? closes this[/]"])


class KeysScreen(ModalScreen[None]):
    """A small box listing the app's key bindings."""

    DEFAULT_CSS = """
    KeysScreen { align: center middle; }
    KeysScreen > Vertical {
        width: auto; height: auto; padding: 1 2;
        border: round $primary; background: $surface;
        border-title-color: $text-primary;
    }
    KeysScreen Static { width: auto; }
    """
    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("q", "dismiss", "Close"),
        Binding("question_mark", "dismiss", "Close"),
    ]

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self._keys = list(keys)

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Keys"
            yield Static(render_keys(self._keys))
