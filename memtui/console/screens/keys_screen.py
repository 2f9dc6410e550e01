"""The ``?`` overlay: every key the console answers to.

Where the screen is too short for one column (80x24) the list folds into as many columns as
it needs, and scrolls inside a box no taller than the screen if even that is not enough; how
to close it is on the box's border, never scrolled away.
"""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.widgets import Static

from memtui.console.screens.modal import Modal

KEY_NAMES = {"question_mark": "?", "escape": "esc"}
CLOSE_HINT = "esc, q or ? closes"


BOX_LINES = 2
"""Lines the box's border takes from the screen's height."""
COLUMN_GAP = 4


def render_keys(keys: Sequence[tuple[str, str]], rows: int | None = None) -> str:
    """``key  description`` entries as content markup, down columns of at most ``rows``
    (one column for None)."""
    width = max((len(KEY_NAMES.get(k, k)) for k, _ in keys), default=1)
    entries = [(f"{KEY_NAMES.get(k, k):>{width}}", d) for k, d in keys]
    fit = max(1, rows or len(entries) or 1)
    per_column = -(-len(entries) // -(-len(entries) // fit)) if entries else 1  # balanced columns
    columns = [entries[i : i + per_column] for i in range(0, len(entries), per_column)]
    spans = [max(len(k) + 2 + len(d) for k, d in column) + COLUMN_GAP for column in columns]
    lines = []
    for row in range(min(per_column, len(entries))):
        cells = [
            (column[row], span) for column, span in zip(columns, spans, strict=True) if row < len(column)
        ]
        lines.append("".join(f"[b $text-accent]{k}[/]  {d:<{span - len(k) - 2}}" for (k, d), span in cells))
    return "\n".join(line.rstrip() for line in lines)


class KeysScreen(Modal[None]):
    """A small box listing the app's key bindings."""

    DEFAULT_CSS = """
    KeysScreen > Vertical { width: auto; min-width: 40; max-width: 100%; }
    KeysScreen VerticalScroll { width: auto; }
    KeysScreen Static { width: auto; }
    """
    BINDINGS = [
        Binding("q", "close", "Close"),
        Binding("question_mark", "close", "Close"),
    ]

    def __init__(self, keys: Sequence[tuple[str, str]]) -> None:
        super().__init__()
        self._keys = list(keys)

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Keys"
            box.border_subtitle = CLOSE_HINT
            with VerticalScroll():
                yield Static(self._key_list(), id="key-list")

    def _key_list(self) -> str:
        return render_keys(self._keys, max(1, self.app.size.height - BOX_LINES))

    def on_resize(self) -> None:
        self.query_one("#key-list", Static).update(self._key_list())
