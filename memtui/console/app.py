"""The console: ``MemtuiApp`` follows one run, draws it and carries the operator's commands.

Data flow: ``EngineClient`` (a worker on the app's loop) -> each message folded at once, in
arrival order, into a frozen ``RunView`` -> handed to every panel
at most twice a second (at once when the console has been quiet, so a step still reaches the
screen in ~100 ms), the charts every two seconds. Longer chart windows are read from the
store in a worker thread. Nothing here blocks the event loop.

Operator commands (approve, clamp, reject, stop, pause, chaos: the kinds the run advertises,
each with its form) go to the supervisor as requests
(``memtui.console.operator_commands``); each destructive one asks first, and
``--readonly`` hides and refuses all of them. What it shows and how (screens, panels,
chart windows, themes) is ``memtui.console.display_commands``. ``q`` only closes the console: it never sends
Stop, the run goes on.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from pydantic import BaseModel
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Container
from textual.events import Resize
from textual.timer import Timer
from textual.widgets import Footer

from engine.domain import Event
from engine.protocol import (
    TELEMETRY_HZ,
    Error,
    EventMessage,
    Hardware,
    ServerMessage,
    Telemetry,
    Welcome,
)
from engine.run.directory import RunDir
from memtui.client import ConnectionState, EngineClient, EngineRefused
from memtui.console.alert_state import ALERT_EVENT, rings_bell, toast
from memtui.console.display_commands import DisplayCommands
from memtui.console.history_view import initial_view
from memtui.console.messages import RunFiguresRead, WindowRead
from memtui.console.palette import ConsoleCommands
from memtui.console.run_view import RunView
from memtui.console.screens.too_small_screen import MIN_HEIGHT, MIN_WIDTH, TooSmallScreen
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
from memtui.theming import DEFAULT_THEME, available_themes, load_theme

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
PANEL_KEYS: dict[str, str] = {
    "1": "memory",
    "2": "throughput",
    "3": "numerics",
    "4": "directives",
    "5": "events",
    "6": "hardware",
    "7": "metrics",
}


class MemtuiApp(DisplayCommands):
    """The operator console for one run (its requests to the run: ``OperatorCommands``)."""

    CSS_PATH = "app.tcss"
    TITLE = "memtui"
    COMMANDS = {ConsoleCommands}
    BINDINGS = [
        Binding("q", "detach", "Detach"),
        Binding("question_mark,f1", "keys", "Keys", key_display="?"),
        Binding("a", "approve", "Approve"),
        Binding("c", "clamp", "Clamp"),
        Binding("r", "reject", "Reject"),
        Binding("enter", "details", "Details", show=False),
        Binding("down", "cursor(1)", "Next directive", show=False, key_display="↓"),
        Binding("up", "cursor(-1)", "Previous directive", show=False, key_display="↑"),
        Binding("s", "stop", "Stop run"),
        Binding("P", "pause", "Pause"),
        Binding("P", "unpause", "Continue"),
        Binding("k", "kill_trainer", "Kill trainer", show=False),
        Binding("x", "chaos_menu", "Chaos", show=False),
        Binding("f", "freeze", "Freeze"),
        Binding("w", "window", "Window"),
        Binding("e", "event_filter", "Filter", show=False),
        Binding("z", "maximize", "Maximise", show=False),
        Binding("p", "save_svg", "Screenshot", show=False),
        Binding("t", "next_theme", "Theme", show=False),
        Binding("C", "checkpoints", "Checkpoints", show=False),
        Binding("A", "alerts", "Alerts", show=False),
        Binding("E", "endurance", "Endurance", show=False),
        *(
            Binding(key, f"toggle_panel('{name}')", f"Toggle {name}", show=False)
            for key, name in PANEL_KEYS.items()
        ),
        # Read-only: the command keys above are hidden and this one answers them at once.
        Binding("a,c,r,s,P,k,x", "refused", "Commands refused", show=False, key_display="a c r s P"),
    ]

    def __init__(
        self,
        run: RunDir,
        *,
        live: bool = True,
        view: RunView | None = None,
        theme_name: str = DEFAULT_THEME,
        clock: Callable[[], float] = time.time,
        readonly: bool = False,
        bell: bool = False,
    ) -> None:
        """``live=False`` shows ``view`` (e.g. a finished run's history) without connecting."""
        super().__init__()
        self.run_dir = run
        self.live = live
        self.readonly = readonly
        """Hide and refuse every action that changes the run."""
        self.bell_on_alert = bell
        """Ring the terminal bell when a warning or critical alert arrives live."""
        self._live_after: int | None = None  # events above this seq arrived live (not replayed)
        self.view: RunView = view or initial_view(run)
        """The newest folded snapshot; panels draw from it."""
        self.client: EngineClient | None = None
        self.frozen = False
        """The display is paused; data still folds into ``view``."""
        self.sent: list[BaseModel] = []
        """Every request this console sent, in order (for the record and for tests)."""
        self._header: RunHeader | None = None
        self._panels: list[Panel] = []
        self._clock = clock
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
        self.endurance = EnduranceReader(run)
        """The store's run-wide figures and endurance report (read in worker threads)."""
        for stem in available_themes():
            self.register_theme(load_theme(stem))
        self.theme = load_theme(theme_name).name

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
        # Held here: the timer must reach them while another screen (keys) is on top,
        # and after shutdown has begun.
        self._header = self.query_one(RunHeader)
        self._header.readonly = self.readonly
        self._panels = list(self.query(Panel))
        self._fit(self.size.width, self.size.height)
        self.redraw()
        self.set_interval(CLOCK_INTERVAL_S, self._tick)
        if self.live:
            self.run_worker(self._follow_engine(), name="engine", group="engine", exclusive=True)

    # ------------------------------------------------------------------ layout

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        """Compact layout on small terminals; below the minimum, the "too small" screen."""
        compact = width < COMPACT_BELOW[0] or height < COMPACT_BELOW[1]
        self.query_one("#grid").set_class(compact, "-compact")
        self.query_one("#hardware").set_class(compact, "-compact")  # hidden there until toggled (6)
        self.arrange_hardware()
        too_small = width < MIN_WIDTH or height < MIN_HEIGHT
        showing = isinstance(self.screen, TooSmallScreen)
        if too_small and not showing:
            self.push_screen(TooSmallScreen())
        elif showing and not too_small:
            self.pop_screen()

    # ------------------------------------------------------------------ drawing

    def redraw(self, *, charts: bool = True) -> None:
        """Hand the current snapshot to the header and every panel (and their charts if ``charts``)."""
        now = self._clock()
        if self._header is not None:
            self._header.frozen = self.frozen
            self._header.show(self.view, now)
        for panel in self._panels:
            if panel.display:
                panel.show(self.view, now, charts=charts)
        self._dirty = False
        self._drawn_at = time.monotonic()
        if charts:
            self._charts_dirty, self._charts_at = False, self._drawn_at

    def _charts_due(self) -> bool:
        return self._charts_dirty and time.monotonic() - self._charts_at >= CHART_INTERVAL_S

    def _tick(self) -> None:
        """Once a second: re-read a longer window when due, repaint charts left pending, age the header."""
        if self.view.window != "live" and self._clock() - self._window_read_at >= WINDOW_REFRESH_S:
            self._read_window(self.view.window)
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
            self._header.show(self.view, self._clock())

    def _schedule_redraw(self) -> None:
        """Redraw now if the last one is REDRAW_INTERVAL_S old, else once it is; one pending at most."""
        if self._redraw_scheduled or self.frozen or not self.is_running:
            return
        wait = self._drawn_at + REDRAW_INTERVAL_S - time.monotonic()
        if wait > 0:
            self._redraw_timer = self.set_timer(wait, self._redraw_due, name="redraw")
        else:  # after the messages already queued: a burst (a replay) folds into one draw
            self._redraw_pending = True
            self.call_later(self._redraw_due)

    @property
    def _redraw_scheduled(self) -> bool:
        return self._redraw_pending or self._redraw_timer is not None

    def _redraw_due(self) -> None:
        self._redraw_timer, self._redraw_pending = None, False
        if not self.frozen and self._dirty:
            self.redraw(charts=self._charts_due())

    def _fold(self, view: RunView) -> None:
        if view is not self.view:
            if (view.state == "paused") != (self.view.state == "paused"):
                self.refresh_bindings()  # key P: pause <-> continue
            self.view = view
            self._dirty = self._charts_dirty = True
            self._schedule_redraw()

    # ------------------------------------------------------------------ engine

    async def _follow_engine(self) -> None:
        self.client = EngineClient(
            self.run_dir.socket,
            role="console",
            replay_from=self.view.last_seq,
            on_message=self._relay,
            on_state=self._relay_state,
            clock=self._clock,
        )
        try:
            await self.client.run()
        except EngineRefused as err:
            self.notify(f"the supervisor refused the console: {err.reason}", severity="error", timeout=30)
        finally:
            await self.client.close()

    def _relay(self, message: ServerMessage) -> None:
        """Client callback (same event loop): fold each server message into the view at
        once, in the order it arrived. No Textual message per telemetry sample: each would
        wake the app's message pump ten times a second for a fold that costs less than the
        dispatch; the drawing is coalesced by ``_schedule_redraw``."""
        if isinstance(message, Telemetry):
            self._fold(self.view.with_telemetry(message, self._clock()))
        elif isinstance(message, EventMessage):
            self._fold_event(message.event)
        elif isinstance(message, Welcome):
            self._live_after = message.last_seq
            self._fold(self.view.with_welcome(message))
        elif isinstance(message, Hardware):
            self._fold(self.view.with_hardware(message.snapshot))
        elif isinstance(message, Error):
            self.notify(message.reason, title="engine error", severity="error")

    def _relay_state(self, state: ConnectionState) -> None:
        self._fold(self.view.with_connection(state))

    def _fold_event(self, event: Event) -> None:
        fresh = event.seq > self.view.last_seq
        self._fold(self.view.with_event(event, self._clock()))
        live = self._live_after is not None and event.seq > self._live_after
        if fresh and live and event.type == ALERT_EVENT:
            self._announce(event)

    def _announce(self, event: Event) -> None:
        """A live alert: a toast (severity mapped), and the bell if asked for. Replayed
        history is not announced: the events panel and the header show it."""
        title, text, severity, timeout = toast(event)
        self.notify(text, title=title, severity=severity, timeout=timeout, markup=False)
        if self.bell_on_alert and rings_bell(event):
            self.bell()

    def _read_figures(self) -> None:
        """Worker thread: the run-wide tokens/s from the store, handed to the app."""
        self.post_message(RunFiguresRead(self.endurance.throughput()))

    def on_run_figures_read(self, message: RunFiguresRead) -> None:
        self._fold(self.view.with_run_throughput(message.figures))

    def on_window_read(self, message: WindowRead) -> None:
        if message.window == self.view.window:
            self._fold(self.view.with_window(message.window, message.points))

    # ------------------------------------------------------------------ actions: the console

    def action_detach(self) -> None:
        """Close the console only; the run goes on."""
        self.exit()

    # ------------------------------------------------------------------ palette

    def palette_commands(self) -> list[tuple[str, str, str]]:
        """(title, help, action) of every command; a read-only console lists no operator action."""
        commands = [
            ("Directive: approve", "apply the selected directive as the policy allows", "approve"),
            ("Directive: clamp", "edit the selected directive's values", "clamp"),
            ("Directive: reject", "refuse the selected directive with a reason", "reject"),
            ("Directive: details", "everything about the selected directive", "details"),
            *self.reset_palette(),
            *self.rollback_palette(),
            *self.chaos_palette(),
            ("Run: pause training", "hold at the next step boundary; nothing is lost (key P)", "pause"),
            ("Run: continue training", "let the paused run go on (key P)", "unpause"),
            ("Run: stop", "stop the run gracefully (asks first)", "stop"),
            *((f"Panel: toggle {n}", f"key {k}", f"toggle_panel('{n}')") for k, n in PANEL_KEYS.items()),
            ("Panel: maximise / restore", "the focused panel fills the screen", "maximize"),
            ("Display: freeze / unfreeze", "pause drawing; data keeps arriving", "freeze"),
            ("Charts: next window", "last 5 min / last hour / whole run", "window"),
            ("Events: next filter", "all, alerts, decisions, checkpoints, ...", "event_filter"),
            ("Checkpoints: list", "tag, step, size, age, verified (key C)", "checkpoints"),
            (
                "Endurance: report",
                "steps, throughput, OOMs, chaos, resumes, from the store (key E)",
                "endurance",
            ),
            ("Alerts: list", "every alert, firing ones on top; f: firing only (key A)", "alerts"),
            ("Export: screenshot (SVG)", "into the run directory's screenshots/", "save_svg"),
            *((f"Theme: {s}", "switch the palette", f"set_theme('{s}')") for s in available_themes()),
            ("Detach", "close the console; the run goes on", "detach"),
        ]
        return [c for c in commands if self.check_action(c[2].split("(")[0], ())]
