"""The operator's commands to the run: approve, clamp or reject a directive, stop, pause,
continue, chaos.

Each is one request to the supervisor, sent in a worker, its answer a notification; each
destructive one asks first (pausing loses nothing: it does not ask), and a read-only console
hides and refuses all of them. Textual looks actions up on the app, so they live here as the
``action_*`` methods of ``OperatorCommands``, the console app's base: ``MemtuiApp`` owns the
connection, the view and the key bindings, and inherits the commands.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel
from textual.app import App

from engine.chaos_kinds import REQUESTS, parse_request
from engine.protocol import Approve, Chaos, Clamp, DirectiveView, Pause, Reject, Stop
from memtui.client import EngineClient, EngineRefused, EngineUnavailable, Request, new_request_id
from memtui.console.directive_text import render_changes
from memtui.console.run_view import RunView
from memtui.console.screens.clamp_screen import ClampScreen, ClampValues
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.directive_screen import DirectiveScreen
from memtui.console.screens.reject_screen import RejectScreen
from memtui.console.widgets.directives_panel import DirectivesPanel

OPERATOR_ACTIONS = frozenset(
    {"approve", "clamp", "reject", "stop", "pause", "unpause", "kill_trainer", "chaos"}
)
"""Actions that change the run: hidden and refused in a read-only console."""
PAUSE_ACTIONS: dict[str, bool] = {"pause": False, "unpause": True}
"""Key P's two actions and the run being paused that each needs: one key toggles, and the
footer, the keys list and the palette name what it does now."""
REQUEST_REASON = "operator (console)"
"""The reason a stop or a pause from the console carries into the run's events."""


class OperatorCommands(App[None]):
    """The console's requests to the supervisor and the questions asked before them."""

    readonly: bool
    """Hide and refuse every action that changes the run."""
    client: EngineClient | None
    """The connection to the supervisor; None while not following a live run."""
    sent: list[BaseModel]
    """Every request this console sent, in order (for the record and for tests)."""
    view: RunView
    """The newest folded snapshot (the run's id and state, the pending directives)."""
    _clock: Callable[[], float]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console neither shows nor runs the operator's actions; of key P's two,
        only the one that fits the run's state (pause a running run, continue a paused one)."""
        if self.readonly and action in OPERATOR_ACTIONS:
            return False
        if action in PAUSE_ACTIONS:
            return PAUSE_ACTIONS[action] == (self.view.state == "paused")
        return True

    def send_request(self, request: Request, done: str, *, title: str | None = None) -> None:
        """Send ``request`` in a worker; ``done`` is the notification on success, under ``title``
        (default: the request's kind) as is a refusal."""
        if self.readonly:
            self.notify("read-only console: commands are refused", severity="warning")
            return
        if self.client is None:
            self.notify("not connected to a live run", severity="error")
            return
        self.sent.append(request)
        self.run_worker(self._request(self.client, request, done, title or request.kind), group="requests")

    async def _request(self, client: EngineClient, request: Request, done: str, title: str) -> None:
        try:
            await client.request(request)
        except EngineRefused as err:
            self.notify(err.reason, title=f"{title} refused", severity="error", timeout=10)
        except EngineUnavailable as err:
            self.notify(str(err), title=f"{title} not delivered", severity="error", timeout=10)
        else:
            self.notify(done, title=title)

    def _confirm(self, title: str, body: str, then: Callable[[], None], *, yes: str = "Yes") -> None:
        def answered(ok: bool | None) -> None:
            if ok:
                then()

        self.push_screen(ConfirmScreen(title, body, yes=yes), answered)

    # ------------------------------------------------------------------ the run

    def action_stop(self) -> None:
        body = f"Stop {self.view.run_id}? The trainer finishes its step, checkpoints and exits."
        self._confirm(
            "Stop the run",
            body,
            lambda: self.send_request(Stop(id=new_request_id(), reason=REQUEST_REASON), "stopping"),
            yes="Stop",
        )

    def action_pause(self) -> None:
        """Hold training at the next optimizer-step boundary. Nothing is lost, so no question."""
        request = Pause(id=new_request_id(), paused=True, reason=REQUEST_REASON)
        self.send_request(request, "the trainer holds at the next step boundary", title="pause")

    def action_unpause(self) -> None:
        """Let a paused run go on."""
        request = Pause(id=new_request_id(), paused=False, reason=REQUEST_REASON)
        self.send_request(request, "training goes on", title="continue")

    def action_kill_trainer(self) -> None:
        self.action_chaos("kill")

    def action_chaos(self, kind: str) -> None:
        if kind not in REQUESTS:
            self.notify(f"unknown chaos kind {kind!r}", severity="error")
            return
        request = parse_request(kind, {})
        body = f"Inject chaos [b]{kind}[/b] into {self.view.run_id}: {request.description}?"
        self._confirm(
            f"Chaos: {kind}",
            body,
            lambda: self.send_request(Chaos(id=new_request_id(), request=request), f"{kind} sent"),
            yes="Inject",
        )

    # ------------------------------------------------------------------ directives

    def _directive(self) -> DirectiveView | None:
        """The directive under the directives panel's cursor (a warning when there is none)."""
        directive = self.query_one(DirectivesPanel).current()
        if directive is None:
            self.notify("no pending directive", severity="warning")
        return directive

    def action_approve(self) -> None:
        d = self._directive()
        if d is None:
            return
        self._confirm(
            f"Approve {d.id}",
            f"Apply as the policy allows it:\n{render_changes(d.requested, d.allowed)}",
            lambda: self.send_request(Approve(id=new_request_id(), directive_id=d.id), f"{d.id} approved"),
            yes="Approve",
        )

    def action_clamp(self) -> None:
        d = self._directive()
        if d is None:
            return

        def clamped(values: ClampValues | None) -> None:
            if values:
                self.send_request(
                    Clamp(id=new_request_id(), directive_id=d.id, values=values),  # type: ignore[arg-type]
                    f"{d.id} clamped",
                )

        self.push_screen(ClampScreen(d), clamped)

    def action_reject(self) -> None:
        d = self._directive()
        if d is None:
            return

        def rejected(reason: str | None) -> None:
            if reason:
                self.send_request(
                    Reject(id=new_request_id(), directive_id=d.id, reason=reason), f"{d.id} rejected"
                )

        self.push_screen(RejectScreen(d), rejected)

    def action_details(self) -> None:
        d = self._directive()
        if d is not None:
            self.push_screen(DirectiveScreen(d, self._clock()))
