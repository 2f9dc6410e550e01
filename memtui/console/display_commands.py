"""The console's own commands: what it shows and how, never a change to the run.

The keys list, freezing the display, the charts' window (longer ones read from the store in
a worker thread), the checkpoints, endurance and alerts screens, the event filter, panels
shown, hidden or maximised, an SVG screenshot and the theme. Textual looks actions up on the
app, so they live here as the ``action_*`` methods of ``DisplayCommands``, a base of the
console app between ``OperatorCommands`` (the requests to the run) and ``MemtuiApp`` (the
connection, the view and the bindings).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from textual.binding import Binding

from engine.run.directory import PRIVATE_DIR, PRIVATE_FILE, RunDir
from memtui.console.messages import WindowRead
from memtui.console.operator_commands import OperatorCommands
from memtui.console.run_view import RunView
from memtui.console.screens.alerts_screen import AlertsScreen
from memtui.console.screens.checkpoints_screen import CheckpointsScreen
from memtui.console.screens.endurance_screen import EnduranceScreen
from memtui.console.screens.keys_screen import KeysScreen
from memtui.console.series import WINDOWS, ChartWindow
from memtui.console.widgets.directives_panel import DirectivesPanel
from memtui.console.widgets.event_log import EventLog
from memtui.console.widgets.memory_panel import MemoryPanel
from memtui.console.widgets.panel import Panel
from memtui.endurance_reader import EnduranceReader
from memtui.theming import available_themes, load_theme


class DisplayCommands(OperatorCommands):
    """What the console shows: screens, panels, chart windows, themes, screenshots."""

    run_dir: RunDir
    frozen: bool
    """Drawing paused; data keeps arriving."""
    endurance: EnduranceReader
    _window_read_at: float

    # The app's own (MemtuiApp): it draws the panels and folds what arrives into its view.
    redraw: Callable[..., None]
    _fold: Callable[[RunView], None]

    def action_keys(self) -> None:
        keys = [
            (b.key_display or b.key.split(",")[0], b.description)
            for b in self.BINDINGS
            if isinstance(b, Binding) and self.check_action(b.action.split("(")[0], ())
        ]
        self.push_screen(KeysScreen([*keys, ("ctrl+p", "Command palette")]))

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """↑/↓ move the directives' cursor from anywhere on the main screen while the panel is
        shown (a focused panel with a cursor of its own, the events', keeps them)."""
        if action == "cursor":
            return len(self.screen_stack) == 1 and self.query_one(DirectivesPanel).display
        return super().check_action(action, parameters)

    def action_cursor(self, delta: int) -> None:
        self.query_one(DirectivesPanel).action_move(delta)

    def action_freeze(self) -> None:
        self.frozen = not self.frozen
        self.redraw()  # the header's FROZEN mark; unfreezing catches up at once

    def action_window(self) -> None:
        window = WINDOWS[(WINDOWS.index(self.view.window) + 1) % len(WINDOWS)]
        self._fold(self.view.with_window(window))
        if window != "live":
            self._read_window(window)
        self.notify(f"charts: {window}", timeout=2)

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
            self.call_from_thread(self.notify, f"cannot read the history: {err}", severity="warning")
            return
        self.post_message(WindowRead(window, points))

    def action_checkpoints(self) -> None:
        """The run's checkpoints, verified in a worker thread, re-read on checkpoint events."""
        if isinstance(self.screen, CheckpointsScreen):
            self.screen.dismiss()
        else:
            self.push_screen(CheckpointsScreen(self.run_dir, lambda: self.view, self._clock))

    def action_endurance(self) -> None:
        """The endurance report's figures, recomputed from the store while open (key E)."""
        if isinstance(self.screen, EnduranceScreen):
            self.screen.dismiss()
        else:
            self.push_screen(EnduranceScreen(self.endurance))

    def action_alerts(self) -> None:
        """The alert list (firing ones on top), kept up to date while open."""
        if isinstance(self.screen, AlertsScreen):
            self.screen.dismiss()
        else:
            self.push_screen(AlertsScreen(lambda: self.view, self._clock))

    def action_event_filter(self) -> None:
        kind = self.query_one(EventLog).cycle_filter()
        self.notify(f"events: {kind}", timeout=2)

    def action_toggle_panel(self, name: str) -> None:
        panel = self.query_one(f"#{name}", Panel)
        panel.display = not panel.display
        self.arrange_hardware()
        if panel.display:
            panel.show(self.view, self._clock())

    def arrange_hardware(self) -> None:
        """The compact layout has no room for Hardware beside every panel: shown (key 6), it
        takes the memory and throughput row's place (``#grid.-hardware``), and the others
        stay whole; hidden again, that row comes back."""
        grid, hardware = self.query_one("#grid"), self.query_one("#hardware", Panel)
        grid.set_class(grid.has_class("-compact") and hardware.display, "-hardware")

    def action_maximize(self) -> None:
        screen = self.screen
        if screen.maximized is not None:
            screen.minimize()
            return
        focused = screen.focused
        if not (isinstance(focused, Panel) and focused.display and focused.region.area):
            focused = self.query_one(MemoryPanel)  # e.g. the hidden hardware panel (compact) has focus
        screen.maximize(focused)

    def action_save_svg(self) -> None:
        folder = self.run_dir.path / "screenshots"
        try:
            folder.mkdir(mode=PRIVATE_DIR, exist_ok=True)  # private, as the rest of the run
            path = self.save_screenshot(path=str(folder))
            os.chmod(path, PRIVATE_FILE)
        except OSError as err:
            self.notify(f"cannot save the screenshot: {err}", severity="error")
            return
        self.notify(str(Path(path)), title="screenshot saved (SVG)")

    def action_next_theme(self) -> None:
        names = [load_theme(stem).name for stem in available_themes()]
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_set_theme(self, stem: str) -> None:
        self.theme = load_theme(stem).name
