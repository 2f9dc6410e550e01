"""The console's main screen: the header, the panels, the footer, and what they show.

It draws the app's newest view (``view()``) at a steady rate: new data after a quiet spell
at once, else at most every ``REDRAW_INTERVAL_S``, the charts every ``CHART_INTERVAL_S``,
nothing while frozen. Its display actions (panels shown, hidden or maximised, the charts'
window, the event filter, the key list, the checkpoints, alerts and endurance screens, a
screenshot) change what is shown, never the run; its bindings are the actions table's
(``memtui.console.actions``), the app's actions among them. Longer chart windows and the
run-wide figures are read from the store in worker threads and handed to the app
(``WindowRead``, ``RunFiguresRead``), which folds them into the view.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.screen import Screen
from textual.timer import Timer
from textual.widgets import Footer

from engine.run.directory import PRIVATE_DIR, PRIVATE_FILE, RunDir
from engine.wire.protocol import TELEMETRY_HZ, DirectiveView
from memtui.console.actions import LISTED, bindings, key_entries
from memtui.console.messages import RunFiguresRead, WindowRead
from memtui.console.run_view import RunView
from memtui.console.screens.alerts_screen import AlertsScreen
from memtui.console.screens.checkpoints_screen import CheckpointsScreen
from memtui.console.screens.endurance_screen import EnduranceScreen
from memtui.console.screens.keys_screen import KeysScreen
from memtui.console.series import WINDOWS, ChartWindow
from memtui.console.widgets.directives_panel import DirectivesPanel
from memtui.console.widgets.event_log import EventLog
from memtui.console.widgets.hardware_panel import HardwarePanel
from memtui.console.widgets.memory_panel import MemoryPanel
from memtui.console.widgets.metrics_panel import MetricsPanel
from memtui.console.widgets.numerics_panel import NumericsPanel
from memtui.console.widgets.panel import Panel
from memtui.console.widgets.run_header import RunHeader
from memtui.console.widgets.throughput_panel import ThroughputPanel
from memtui.endurance_reader import EnduranceReader

REDRAW_INTERVAL_S = 5 / TELEMETRY_HZ
"""At least this long (0.5 s) between two redraws of the figures. Each redraw repaints
only the lines whose text changed (``LinesView``: a few per panel, one of the header's) and
no panel's box (``SteadyTitle``), but still costs a compositor pass over the rows between
them, so this rate sets an attached console's CPU. New data after a quiet spell draws at once (the
leading edge), and what arrives within the interval is drawn at its end, so the step on
screen is at most one telemetry period (0.1 s) old when drawn (bench/console_live.py)."""
CHART_INTERVAL_S = 2.0
"""At least this long between two repaints of the charts (most of the panels' cells); they
scroll by a few columns in that time."""
CLOCK_INTERVAL_S = 1.0
"""The header's elapsed time and data age move on this often without new data; a pending
chart repaint and a longer window's re-read are checked then too."""
WINDOW_REFRESH_S = 10.0
"""How often a longer chart window is read again from the store."""
FIGURES_REFRESH_S = 10.0
"""How often the run-wide tokens/s (every attempt) is read on from the store."""
COMPACT_BELOW = (120, 36)
"""Width or height under which the panels stack in the compact layout."""


class MainScreen(Screen[None]):
    """The header, the grid of panels, Hardware under it and the footer, drawn from the view."""

    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [*bindings()]

    def __init__(
        self,
        run: RunDir,
        *,
        view: Callable[[], RunView],
        fold: Callable[[RunView], None],
        clock: Callable[[], float],
        readonly: bool,
    ) -> None:
        """``view`` returns the app's newest view and ``fold`` replaces it (the charts'
        window); ``clock`` is Unix time; ``readonly`` marks the header."""
        super().__init__()
        self.run_dir = run
        self._view, self._fold, self._clock, self._readonly = view, fold, clock, readonly
        self.endurance = EnduranceReader(run)
        """The store's run-wide figures and endurance report (read in worker threads)."""
        self.frozen = False
        """The display is paused; data still folds into the app's view."""
        self._header: RunHeader | None = None
        self._panels: list[Panel] = []
        self._dirty = True
        self._charts_dirty = True
        # Monotonic seconds of the last chart repaint and redraw; -inf: never, so the first
        # data draws at once (monotonic time starts near 0 at boot, not at a large number).
        self._charts_at = -math.inf
        self._drawn_at = -math.inf
        self._redraw_timer: Timer | None = None  # a redraw due at the end of the interval
        self._redraw_pending = False  # a redraw due at once (after the queued messages)
        self._window_read_at = 0.0
        self._figures_read_at = -math.inf  # clock of the last run-wide read; -inf: read at once

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Container(id="grid"):
            yield MemoryPanel(id="memory")
            yield ThroughputPanel(id="throughput")
            yield NumericsPanel(id="numerics")
            yield DirectivesPanel(id="directives")
            yield EventLog(id="events")
            yield MetricsPanel(id="metrics")
        yield HardwarePanel(id="hardware")
        yield Footer()

    def on_mount(self) -> None:
        # Held here: the timer must reach them while another screen (keys) is on top.
        self._header = self.query_one(RunHeader)
        self._header.readonly = self._readonly
        self._panels = list(self.query(Panel))
        self.fit(self.app.size.width, self.app.size.height)
        self.redraw()
        self.set_interval(CLOCK_INTERVAL_S, self._tick)

    def fit(self, width: int, height: int) -> None:
        """The compact layout below ``COMPACT_BELOW`` (once composed: it fits itself when mounted)."""
        if self._header is None:
            return
        compact = width < COMPACT_BELOW[0] or height < COMPACT_BELOW[1]
        self.query_one("#grid").set_class(compact, "-compact")
        self.query_one("#hardware").set_class(compact, "-compact")  # hidden there until toggled (6)
        self.arrange_hardware()

    def current_directive(self) -> DirectiveView | None:
        """The directive under the directives panel's cursor."""
        return self.query_one(DirectivesPanel).current()

    # ------------------------------------------------------------------ drawing

    def redraw(self, *, charts: bool = True) -> None:
        """Hand the current view to the header and every panel (and their charts if ``charts``)."""
        now, view = self._clock(), self._view()
        if self._header is not None:
            self._header.frozen = self.frozen
            self._header.show(view, now)
        for panel in self._panels:
            if panel.display:
                panel.show(view, now, charts=charts)
        self._dirty = False
        self._drawn_at = time.monotonic()
        if charts:
            self._charts_dirty, self._charts_at = False, self._drawn_at

    def view_changed(self) -> None:
        """The app folded a new view: draw it now or once the interval is over."""
        self._dirty = self._charts_dirty = True
        self._schedule_redraw()

    def _charts_due(self) -> bool:
        return self._charts_dirty and time.monotonic() - self._charts_at >= CHART_INTERVAL_S

    def _tick(self) -> None:
        """Once a second: re-read a longer window or the run's figures when due, repaint
        charts left pending, age the header."""
        view = self._view()
        if view.window != "live" and self._clock() - self._window_read_at >= WINDOW_REFRESH_S:
            self._read_window(view.window)
        if self._clock() - self._figures_read_at >= FIGURES_REFRESH_S:
            self._figures_read_at = self._clock()
            self.run_worker(
                self._read_figures, thread=True, group="figures", exclusive=True, exit_on_error=False
            )
        if self.frozen or self._redraw_scheduled:
            return
        if self._charts_due():
            self.redraw(charts=True)
        elif self._header is not None:  # ages and elapsed time move on without new data
            self._header.show(view, self._clock())

    def _schedule_redraw(self) -> None:
        """Redraw now if the last one is REDRAW_INTERVAL_S old, else once it is; one pending at most."""
        if self._redraw_scheduled or self.frozen or not self.app.is_running:
            return
        wait = self._drawn_at + REDRAW_INTERVAL_S - time.monotonic()
        if wait > 0:
            self._redraw_timer = self.set_timer(wait, self._redraw_due, name="redraw")
        else:  # after the messages already queued: a burst (a replay) folds into one draw
            self._redraw_pending = True
            self.app.call_later(self._redraw_due)

    @property
    def _redraw_scheduled(self) -> bool:
        return self._redraw_pending or self._redraw_timer is not None

    def _redraw_due(self) -> None:
        self._redraw_timer, self._redraw_pending = None, False
        if not self.frozen and self._dirty:
            self.redraw(charts=self._charts_due())

    # ------------------------------------------------------------------ the store

    def _read_figures(self) -> None:
        """Worker thread: the run-wide tokens/s from the store, handed to the app."""
        self.app.post_message(RunFiguresRead(self.endurance.throughput()))

    def _read_window(self, window: ChartWindow) -> None:
        self._window_read_at = self._clock()
        self.run_worker(
            lambda: self._window_points(window),
            thread=True,
            group="window",
            exclusive=True,
            exit_on_error=False,
        )

    def _window_points(self, window: ChartWindow) -> None:
        """Worker thread: read and downsample the store, then hand the points to the app."""
        from memtui.console.window_reader import read_window

        try:
            points = tuple(read_window(self.run_dir.store, window, self._clock()))
        except Exception as err:  # a store being written can be briefly unreadable
            self.app.call_from_thread(self.notify, f"cannot read the history: {err}", severity="warning")
            return
        self.app.post_message(WindowRead(window, points))

    # ------------------------------------------------------------------ display actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """↑/↓ move the directives' cursor from anywhere on the screen while the panel is
        shown (a focused panel with a cursor of its own, the events', keeps them)."""
        if action == "cursor":
            return self.query_one(DirectivesPanel).display
        return True

    def action_keys(self) -> None:
        """Every key that does something now (the app's read-only and pause rules applied)."""
        usable = [r for r in LISTED if (self.app if r.owner == "app" else self).check_action(r.method, ())]
        self.app.push_screen(KeysScreen(key_entries(usable)))

    def action_cursor(self, delta: int) -> None:
        self.query_one(DirectivesPanel).action_move(delta)

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.redraw()  # the header's FROZEN mark; unfreezing catches up at once

    def action_window(self) -> None:
        view = self._view()
        window = WINDOWS[(WINDOWS.index(view.window) + 1) % len(WINDOWS)]
        self._fold(view.with_window(window))
        if window != "live":
            self._read_window(window)
        self.notify(f"charts: {window}", timeout=2)

    def action_checkpoints(self) -> None:
        """The run's checkpoints, verified in a worker thread, re-read on checkpoint events."""
        self.app.push_screen(CheckpointsScreen(self.run_dir, self._view, self._clock))

    def action_endurance(self) -> None:
        """The endurance report's figures, recomputed from the store while open (key E)."""
        self.app.push_screen(EnduranceScreen(self.endurance))

    def action_alerts(self) -> None:
        """The alert list (firing ones on top), kept up to date while open."""
        self.app.push_screen(AlertsScreen(self._view, self._clock))

    def action_event_filter(self) -> None:
        kind = self.query_one(EventLog).cycle_filter()
        self.notify(f"events: {kind}", timeout=2)

    def action_toggle_panel(self, name: str) -> None:
        panel = self.query_one(f"#{name}", Panel)
        panel.display = not panel.display
        self.arrange_hardware()
        if panel.display:
            panel.show(self._view(), self._clock())

    def arrange_hardware(self) -> None:
        """The compact layout has no room for Hardware beside every panel: shown (key 6), it
        takes the memory and throughput row's place (``#grid.-hardware``), and the others
        stay whole; hidden again, that row comes back."""
        grid, hardware = self.query_one("#grid"), self.query_one("#hardware", Panel)
        grid.set_class(grid.has_class("-compact") and hardware.display, "-hardware")

    def action_maximize(self) -> None:
        if self.maximized is not None:
            self.minimize()
            return
        focused = self.focused
        if not (isinstance(focused, Panel) and focused.display and focused.region.area):
            focused = self.query_one(MemoryPanel)  # e.g. the hidden hardware panel (compact) has focus
        self.maximize(focused)

    def action_save_svg(self) -> None:
        folder = self.run_dir.path / "screenshots"
        try:
            folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)  # private, as the rest of the run
            path = self.app.save_screenshot(path=str(folder))
            os.chmod(path, PRIVATE_FILE)
        except OSError as err:
            self.notify(f"cannot save the screenshot: {err}", severity="error")
            return
        self.notify(str(Path(path)), title="screenshot saved (SVG)")
