"""The console: ``MemtuiApp`` follows one run and carries the operator's requests to it.

The app owns the connection, the view and the requests; its ``MainScreen`` owns the panels
and what they show (``memtui.console.main_screen``). Data flow: ``EngineClient`` (a worker
on the app's loop) -> each message folded at once, in arrival order, by ``RunView.apply``
into a frozen ``RunView`` -> the main screen draws it at its own rate. Nothing here blocks
the event loop.

Operator requests (approve, clamp, reject, stop, pause, chaos: the kinds the run
advertises, each with its form) go to the supervisor in a worker, their answer a
notification; each destructive one asks first (pausing loses nothing: it does not ask). Keys,
the key list, the palette and what a read-only console (``--readonly``, or a run's history)
hides and refuses all come from one table (``memtui.console.actions``). ``q`` only closes
the console: it never sends Stop, the run goes on.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pydantic import BaseModel
from textual.app import App
from textual.events import Resize
from textual.screen import Screen

from engine.chaos.table import KINDS, ChaosKindSpec, ChaosRequest, parse_request
from engine.domain import TERMINAL_STATES, Event
from engine.run.directory import RunDir
from engine.wire.protocol import Chaos, DirectiveView, Error, EventMessage, Ok, Pause, ServerMessage, Welcome
from memtui.chaos.chaos_phrases import depends_on_the_run
from memtui.client import (
    ConnectionState,
    EngineClient,
    EngineRefused,
    EngineUnavailable,
    Request,
    new_request_id,
)
from memtui.console import questions
from memtui.console.actions import ACTIONS, BY_METHOD, allowed, method_of
from memtui.console.alert_state import ALERT_EVENT, rings_bell, toast
from memtui.console.history_view import initial_view
from memtui.console.main_screen import MainScreen
from memtui.console.messages import RunFiguresRead, WindowRead
from memtui.console.palette import ConsoleCommands, entries
from memtui.console.run_view import RunView
from memtui.console.screens.chaos_form_screen import ChaosFormScreen
from memtui.console.screens.chaos_menu_screen import ChaosMenuScreen
from memtui.console.screens.clamp_screen import ClampScreen, ClampValues
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.directive_screen import DirectiveScreen
from memtui.console.screens.reject_screen import RejectScreen
from memtui.console.screens.too_small_screen import MIN_HEIGHT, MIN_WIDTH, TooSmallScreen
from memtui.run_facts import RunFacts, run_facts
from memtui.theming import DEFAULT_THEME, available_themes, load_theme

READONLY_REFUSAL = "read-only console: commands are refused"
"""What a command key says in a console opened with ``--readonly``."""
OFFLINE_REFUSAL = "read-only: not connected to a live run (history)"
"""What a command key says in a console showing a run's history, not following a live run."""
ENDED_REFUSAL = "the run has ended ({state}): there is nothing left to command (memtui resume RUN)"
"""What a command key says once the run this console follows has ended (stop, pause, chaos...)."""


class MemtuiApp(App[None]):
    """The operator console for one run."""

    CSS_PATH = "app.tcss"
    TITLE = "memtui"
    COMMANDS = {ConsoleCommands}

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
        """Following a live run (False: its history, read-only whatever ``readonly`` says)."""
        self.readonly = readonly
        """Hide and refuse every action that changes the run."""
        self.bell_on_alert = bell
        """Ring the terminal bell when a warning or critical alert arrives live."""
        self._live_after: int | None = None  # events above this seq arrived live (not replayed)
        self.view: RunView = view or initial_view(run)
        """The newest folded snapshot; the main screen draws from it."""
        self.client: EngineClient | None = None
        """The connection to the supervisor; None while not following a live run."""
        self.sent: list[BaseModel] = []
        """Every request this console sent, in order (for the record and for tests)."""
        self._clock = clock
        self.main = MainScreen(run, view=lambda: self.view, fold=self.fold, clock=self.now, readonly=readonly)
        """The panels and what they show."""
        for stem in available_themes():
            self.register_theme(load_theme(stem))
        self.theme = load_theme(theme_name).name

    def get_default_screen(self) -> Screen[None]:
        return self.main

    def on_mount(self) -> None:
        self._fit(self.size.width, self.size.height)
        if self.live:
            self.run_worker(self._follow_engine(), name="engine", group="engine", exclusive=True)

    def now(self) -> float:
        """Unix time by the console's clock (a fixed one in tests)."""
        return self._clock()

    def on_resize(self, event: Resize) -> None:
        self._fit(event.size.width, event.size.height)

    def _fit(self, width: int, height: int) -> None:
        """The main screen's layout for the size; below the minimum, the "too small" screen."""
        self.main.fit(width, height)
        too_small = width < MIN_WIDTH or height < MIN_HEIGHT
        showing = isinstance(self.screen, TooSmallScreen)
        if too_small and not showing:
            self.push_screen(TooSmallScreen())
        elif showing and not too_small:
            self.pop_screen()

    # ------------------------------------------------------------------ the view

    def fold(self, view: RunView) -> None:
        """Make ``view`` the newest; the main screen draws it at its rate."""
        if view is not self.view:
            paused, ended = (view.state == "paused", view.state in TERMINAL_STATES)
            if (paused, ended) != (self.view.state == "paused", self.view.state in TERMINAL_STATES):
                self.refresh_bindings()  # key P: pause <-> continue; an ended run: no command keys
            self.view = view
            self.main.view_changed()

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
        once, in the order it arrived, through ``RunView.apply``. No Textual message per
        telemetry sample: each would wake the app's message pump ten times a second for a
        fold that costs less than the dispatch; the main screen coalesces the drawing."""
        if isinstance(message, Error):
            self.notify(message.reason, title="engine error", severity="error")
            return
        if isinstance(message, Welcome):
            self._live_after = message.last_seq
        fresh = isinstance(message, EventMessage) and message.event.seq > self.view.last_seq
        self.fold(self.view.apply(message, self._clock()))
        if fresh and isinstance(message, EventMessage):
            self._announce(message.event)

    def _relay_state(self, state: ConnectionState) -> None:
        self.fold(self.view.with_connection(state))

    def _announce(self, event: Event) -> None:
        """A live alert: a toast (severity mapped), and the bell if asked for. Replayed
        history is not announced: the events panel and the header show it."""
        if event.type != ALERT_EVENT or self._live_after is None or event.seq <= self._live_after:
            return
        title, text, severity, timeout = toast(event)
        self.notify(text, title=title, severity=severity, timeout=timeout, markup=False)
        if self.bell_on_alert and rings_bell(event):
            self.bell()

    def on_run_figures_read(self, message: RunFiguresRead) -> None:
        self.fold(self.view.with_run_throughput(message.figures))

    def on_window_read(self, message: WindowRead) -> None:
        if message.window == self.view.window:
            self.fold(self.view.with_window(message.window, message.points))

    # ------------------------------------------------------------------ what may run

    def refusal(self) -> str | None:
        """Why this console sends no command (``--readonly``, or not following a live run);
        None when it does."""
        if self.readonly:
            return READONLY_REFUSAL
        if not self.live:
            return OFFLINE_REFUSAL
        if self.view.state in TERMINAL_STATES:
            return ENDED_REFUSAL.format(state=self.view.state)
        return None

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """The actions table's rule for the app's actions (read-only, pause)."""
        row = BY_METHOD.get(action)
        if row is None or row.owner != "app":
            return True
        return allowed(row, refusal=self.refusal(), paused=self.view.state == "paused")

    def palette_commands(self) -> list[tuple[str, str, str]]:
        """(title, help, action) of every command the palette offers now."""
        rows = entries(ACTIONS, self.view, self.offered_chaos(), available_themes())
        owners = {"app": self, "main": self.main}
        usable = [r for r in rows if owners[r.owner].check_action(method_of(r.action), ())]
        return [(r.title, r.description, r.action) for r in usable]

    def action_refused(self) -> None:
        """A command key in a read-only console: say so, ask nothing."""
        self.notify(self.refusal() or "", severity="warning")

    # ------------------------------------------------------------------ requests

    def send_request(
        self, request: Request, done: str | Callable[[Ok], str], *, title: str | None = None
    ) -> None:
        """Send ``request`` in a worker; ``done`` is the notification on success (or makes it
        from the answer), under ``title`` (default: the request's kind) as is a refusal."""
        refusal = self.refusal()
        if refusal is not None:
            self.notify(refusal, severity="warning")
            return
        if self.client is None:
            self.notify("not connected to a live run", severity="error")
            return
        self.sent.append(request)
        self.run_worker(self._request(self.client, request, done, title or request.kind), group="requests")

    async def _request(
        self, client: EngineClient, request: Request, done: str | Callable[[Ok], str], title: str
    ) -> None:
        try:
            answer = await client.request(request)
        except EngineRefused as err:
            self.notify(err.reason, title=f"{title} refused", severity="error", timeout=10)
        except EngineUnavailable as err:
            self.notify(str(err), title=f"{title} not delivered", severity="error", timeout=10)
        else:
            self.notify(done if isinstance(done, str) else done(answer), title=title, markup=False)

    def ask(self, question: questions.Question) -> None:
        """The question; its request is sent on an explicit yes."""

        def answered(yes: bool | None) -> None:
            if yes:
                self.send_request(question.request, question.done)

        self.push_screen(ConfirmScreen(question.title, question.body, yes=question.yes), answered)

    # ------------------------------------------------------------------ the run

    def action_detach(self) -> None:
        """Close the console only; the run goes on."""
        self.exit()

    def action_stop(self) -> None:
        self.ask(questions.stop(self.view.run_id))

    def action_pause(self) -> None:
        """Hold training at the next optimizer-step boundary. Nothing is lost, so no question."""
        request = Pause(id=new_request_id(), paused=True, reason=questions.REQUEST_REASON)
        self.send_request(request, "the trainer holds at the next step boundary", title="pause")

    def action_unpause(self) -> None:
        """Let a paused run go on."""
        request = Pause(id=new_request_id(), paused=False, reason=questions.REQUEST_REASON)
        self.send_request(request, "training goes on", title="continue")

    def action_next_theme(self) -> None:
        names = [load_theme(stem).name for stem in available_themes()]
        current = names.index(self.theme) if self.theme in names else -1
        self.theme = names[(current + 1) % len(names)]
        self.notify(f"theme: {self.theme}", timeout=2)

    def action_set_theme(self, stem: str) -> None:
        self.theme = load_theme(stem).name

    # ------------------------------------------------------------------ chaos

    def offered_chaos(self) -> list[ChaosKindSpec]:
        """The chaos kinds the run's supervisor advertises (and this memtui can send)."""
        return [spec for spec in self.view.chaos if spec.kind in KINDS]

    def action_chaos_menu(self) -> None:
        offered = self.offered_chaos()
        if not offered:
            self.notify("this run offers no chaos (not connected, or it performs none)", severity="warning")
            return

        def chosen(kind: str | None) -> None:
            if kind:
                self.action_chaos(kind)

        self.push_screen(ChaosMenuScreen(offered), chosen)

    def action_kill_trainer(self) -> None:
        self.action_chaos("kill")

    def action_chaos(self, kind: str) -> None:
        """``kind``'s form (none for a kind without parameters), then a confirmation, then send."""
        spec = next((s for s in self.offered_chaos() if s.kind == kind), None)
        if spec is None:
            offered = ", ".join(s.kind for s in self.offered_chaos()) or "none"
            self.notify(f"this run does not perform chaos {kind!r} (it offers: {offered})", severity="error")
            return
        if not spec.params:
            self._confirm_chaos(spec, parse_request(kind, {}))
            return

        def filled(request: ChaosRequest | None) -> None:
            if request is not None:
                self._confirm_chaos(spec, request)

        self.push_screen(ChaosFormScreen(spec), filled)

    def _confirm_chaos(self, spec: ChaosKindSpec, request: ChaosRequest) -> None:
        """The confirmation; for a kind whose outcome depends on the run, once its facts are
        read in a worker thread (a checkpoint not verified before is hashed: seconds)."""
        if not depends_on_the_run(request.kind):
            self._ask_chaos(spec, request, None)
            return

        def read() -> None:
            self.call_from_thread(self._ask_chaos, spec, request, run_facts(self.run_dir))

        self.run_worker(read, thread=True, group="chaos facts", exclusive=True)

    def _ask_chaos(self, spec: ChaosKindSpec, request: ChaosRequest, facts: RunFacts | None) -> None:
        self.ask(questions.chaos(spec, Chaos(id=new_request_id(), request=request), facts, self.view.run_id))

    # ------------------------------------------------------------------ directives

    def _directive(self) -> DirectiveView | None:
        """The directive under the directives panel's cursor (a warning when there is none)."""
        directive = self.main.current_directive()
        if directive is None:
            self.notify("no pending directive", severity="warning")
        return directive

    def action_approve(self) -> None:
        if (d := self._directive()) is not None:
            self._approve(d)

    def action_clamp(self) -> None:
        if (d := self._directive()) is not None:
            self._clamp(d)

    def action_reject(self) -> None:
        if (d := self._directive()) is not None:
            self._reject(d)

    def action_details(self) -> None:
        if (d := self._directive()) is not None:
            screen = DirectiveScreen(d, self._clock, refusal=self.refusal())
            self.push_screen(screen, lambda answer: self._answer(answer, d))

    def _answer(self, answer: str | None, d: DirectiveView) -> None:
        """The answer picked in the directive detail (a, c, r) for the directive it showed."""
        answers = {"approve": self._approve, "clamp": self._clamp, "reject": self._reject}
        if answer in answers and self.refusal() is None:
            answers[answer](d)

    def _approve(self, d: DirectiveView) -> None:
        self.ask(questions.approve(d))

    def _clamp(self, d: DirectiveView) -> None:
        def clamped(values: ClampValues | None) -> None:
            if values:
                request = questions.clamp(d, values)
                self.send_request(request, f"{d.id} clamped")

        self.push_screen(ClampScreen(d), clamped)

    def _reject(self, d: DirectiveView) -> None:
        def rejected(reason: str | None) -> None:
            if reason:
                self.send_request(questions.reject(d, reason), f"{d.id} rejected")

        self.push_screen(RejectScreen(d), rejected)

    def action_reset_field(self, field: str) -> None:
        """Propose ``field`` back at its run default (the supervisor knows it), after asking."""
        self.ask(questions.reset_field(field, self.view.run_id))

    def action_roll_back(self, tag: str, skip_batches: int) -> None:
        """Propose a rollback to ``tag`` skipping ``skip_batches`` steps of data, after asking."""
        self.ask(questions.roll_back(tag, skip_batches, self.view.run_id))
