"""What the console's worker threads tell the app, as Textual messages (small dataclasses).

Server messages are not among them: the engine client runs on the app's own loop and its
callback folds each one into the view at once, in arrival order (``MemtuiApp._relay``).
"""

from __future__ import annotations

from dataclasses import dataclass

from textual.message import Message

from engine.domain import ThroughputFigures
from memtui.console.series import ChartWindow, Point


@dataclass
class WindowRead(Message):
    """A longer chart window, read from the store by a worker thread."""

    window: ChartWindow
    points: tuple[Point, ...]


@dataclass
class RunFiguresRead(Message):
    """The run-wide tokens/s, read from the store by a worker thread (None: unreadable)."""

    figures: ThroughputFigures | None
