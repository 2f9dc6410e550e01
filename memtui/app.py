"""The console: ``MemtuiApp`` follows one run and draws it.

Data flow: ``EngineClient`` (a worker on the app's loop) -> Textual messages
(``TelemetryReceived`` coalesces) -> folded into a frozen ``RunView`` -> a 10 Hz timer hands
the newest view to every panel if it changed. Nothing here blocks the event loop, and
``q`` only closes the console: it never sends Stop, the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.widgets import Footer

from engine.protocol import TELEMETRY_HZ, Error, EventMessage, ServerMessage, Telemetry, Welcome
from engine.rundir import RunDir
from memtui.client import ConnectionState, EngineClient, EngineRefused
from memtui.history import initial_view
from memtui.messages import ConnectionChanged, EventReceived, TelemetryReceived, WelcomeReceived
from memtui.run_view import RunView
from memtui.screens.keys_screen import KeysScreen
from memtui.theming import DEFAULT_THEME, load_theme
from memtui.widgets.event_log import EventLog
from memtui.widgets.loss_scale_panel import LossScalePanel
from memtui.widgets.memory_panel import MemoryPanel
from memtui.widgets.panel import Panel
from memtui.widgets.run_header import RunHeader
from memtui.widgets.stats_panel import StatsPanel

REDRAW_INTERVAL_S = 1.0 / TELEMETRY_HZ
"""At most this often the panels redraw (telemetry arrives at most ~10 Hz anyway)."""


class MemtuiApp(App[None]):
    """The operator console for one run."""

    CSS_PATH = "app.tcss"
    TITLE = "memtui"
    ENABLE_COMMAND_PALETTE = False
    BINDINGS = [
        Binding("q", "detach", "Detach"),
        Binding("question_mark", "keys", "Keys"),
    ]

    def __init__(
        self,
        run: RunDir,
        *,
        live: bool = True,
        view: RunView | None = None,
        theme_name: str = DEFAULT_THEME,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """``live=False`` shows ``view`` (e.g. a finished run's history) without connecting."""
        super().__init__()
        self.run_dir = run
        self.live = live
        self.view: RunView = view or initial_view(run)
        """The newest folded snapshot; panels draw from it."""
        self.client: EngineClient | None = None
        self._header: RunHeader | None = None
        self._panels: list[Panel] = []
        self._clock = clock
        self._dirty = True
        theme = load_theme(theme_name)
        self.register_theme(theme)
        self.theme = theme.name

    def compose(self) -> ComposeResult:
        yield RunHeader(id="header")
        with Horizontal(id="top"):
            yield StatsPanel(id="stats")
            with Vertical(id="right"):
                yield MemoryPanel(id="memory")
                yield LossScalePanel(id="loss-scale")
        yield EventLog(id="events")
        yield Footer()

    def on_mount(self) -> None:
        # Held here: the timer must reach them while another screen (keys) is on top,
        # and after shutdown has begun.
        self._header = self.query_one(RunHeader)
        self._panels = list(self.query(Panel))
        self.redraw()
        self.set_interval(REDRAW_INTERVAL_S, self._tick)
        if self.live:
            self.run_worker(self._follow_engine(), name="engine", group="engine", exclusive=True)

    # ------------------------------------------------------------------ drawing

    def redraw(self) -> None:
        """Hand the current snapshot to the header and every panel."""
        now = self._clock()
        if self._header is not None:
            self._header.show(self.view, now)
        for panel in self._panels:
            panel.show(self.view, now)
        self._dirty = False

    def _tick(self) -> None:
        if self._dirty:
            self.redraw()
        elif self._header is not None:  # ages and elapsed time move on without new data
            self._header.show(self.view, self._clock())

    def _fold(self, view: RunView) -> None:
        if view is not self.view:
            self.view = view
            self._dirty = True

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
        """Client callback (same event loop): turn server messages into app messages."""
        if isinstance(message, Telemetry):
            self.post_message(TelemetryReceived(message))
        elif isinstance(message, EventMessage):
            self.post_message(EventReceived(message.event))
        elif isinstance(message, Welcome):
            self.post_message(WelcomeReceived(message))
        elif isinstance(message, Error):
            self.notify(message.reason, title="engine error", severity="error")

    def _relay_state(self, state: ConnectionState) -> None:
        self.post_message(ConnectionChanged(state))

    def on_telemetry_received(self, message: TelemetryReceived) -> None:
        self._fold(self.view.with_telemetry(message.telemetry, self._clock()))

    def on_event_received(self, message: EventReceived) -> None:
        self._fold(self.view.with_event(message.event, self._clock()))

    def on_welcome_received(self, message: WelcomeReceived) -> None:
        self._fold(self.view.with_welcome(message.welcome))

    def on_connection_changed(self, message: ConnectionChanged) -> None:
        self._fold(self.view.with_connection(message.state))

    # ------------------------------------------------------------------ actions

    def action_detach(self) -> None:
        """Close the console only; the run goes on."""
        self.exit()

    def action_keys(self) -> None:
        keys = [(b.key, b.description) for b in self.BINDINGS if isinstance(b, Binding)]
        self.push_screen(KeysScreen(keys))
