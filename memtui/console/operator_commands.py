"""The operator's commands to the run: approve, clamp or reject a directive, stop, pause,
continue, chaos.

Chaos offers exactly the kinds the run's supervisor advertises (its Welcome, kept in the
view): the menu (key x) or a palette entry opens the kind's form (``ChaosFormScreen``, built
from the kind's spec; none for a kind without parameters), then a confirmation that says
what will happen, then the ``Chaos`` request; the answer names the chaos id.

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
from textual.markup import escape

from engine.chaos.table import KINDS, ChaosKindSpec, ChaosRequest, parse_request
from engine.domain import DIRECTIVE_FIELDS
from engine.events import CheckpointSaved
from engine.protocol import Approve, Chaos, Clamp, DirectiveView, Ok, Pause, Propose, Reject, Stop
from engine.run.directory import RunDir
from memtui.chaos_phrases import depends_on_the_run, what_happens
from memtui.chaos_values import describe_values, request_values
from memtui.client import EngineClient, EngineRefused, EngineUnavailable, Request, new_request_id
from memtui.console.directive_text import FIELD_LABELS, render_changes
from memtui.console.run_view import RunView
from memtui.console.screens.chaos_form_screen import ChaosFormScreen
from memtui.console.screens.chaos_menu_screen import ChaosMenuScreen
from memtui.console.screens.clamp_screen import ClampScreen, ClampValues
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.directive_screen import DirectiveScreen
from memtui.console.screens.reject_screen import RejectScreen
from memtui.console.widgets.directives_panel import DirectivesPanel
from memtui.run_facts import RunFacts, run_facts

ROLLBACK_CHOICES = 3  # tags the palette offers to roll back to, newest first

OPERATOR_ACTIONS = frozenset(
    {
        "approve",
        "clamp",
        "reject",
        "reset_field",
        "stop",
        "pause",
        "unpause",
        "kill_trainer",
        "chaos",
        "chaos_menu",
    }
)
"""Actions that change the run: hidden and refused in a read-only console."""
PAUSE_ACTIONS: dict[str, bool] = {"pause": False, "unpause": True}
"""Key P's two actions and the run being paused that each needs: one key toggles, and the
footer, the keys list and the palette name what it does now."""
REQUEST_REASON = "operator (console)"
READONLY_REFUSAL = "read-only console: commands are refused"
"""What a command key says in a console opened with ``--readonly``."""
OFFLINE_REFUSAL = "read-only: not connected to a live run (history)"
"""What a command key says in a console showing a run's history, not following a live run."""
"""The reason a stop or a pause from the console carries into the run's events."""


class OperatorCommands(App[None]):
    """The console's requests to the supervisor and the questions asked before them."""

    readonly: bool
    """Hide and refuse every action that changes the run."""
    live: bool
    """Following a live run (False: its history, read-only whatever ``readonly`` says)."""
    client: EngineClient | None
    """The connection to the supervisor; None while not following a live run."""
    sent: list[BaseModel]
    """Every request this console sent, in order (for the record and for tests)."""
    view: RunView
    """The newest folded snapshot (the run's id and state, the pending directives)."""
    run_dir: RunDir
    """The run's directory: its checkpoints and config, for what a chaos kind will do to it."""
    _clock: Callable[[], float]

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """A read-only console neither shows nor runs the operator's actions; of key P's two,
        only the one that fits the run's state (pause a running run, continue a paused one)."""
        refusal = self.refusal()
        if action == "refused":  # the command keys' stand-in: says at once why nothing happens
            return refusal is not None
        if refusal is not None and action in OPERATOR_ACTIONS:
            return False
        if action in PAUSE_ACTIONS:
            return PAUSE_ACTIONS[action] == (self.view.state == "paused")
        return True

    def refusal(self) -> str | None:
        """Why this console sends no command (``--readonly``, or not following a live run);
        None when it does."""
        if self.readonly:
            return READONLY_REFUSAL
        return None if self.live else OFFLINE_REFUSAL

    def action_refused(self) -> None:
        """A command key in a read-only console: say so, ask nothing."""
        self.notify(self.refusal() or "", severity="warning")

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

    # ------------------------------------------------------------------ chaos

    def offered_chaos(self) -> list[ChaosKindSpec]:
        """The chaos kinds the run's supervisor advertises (and this memtui can send)."""
        return [spec for spec in self.view.chaos if spec.kind in KINDS]

    def chaos_palette(self) -> list[tuple[str, str, str]]:
        """The palette's chaos entries: the menu, then one per offered kind (none when the run
        offers none)."""
        offered = self.offered_chaos()
        if not offered:
            return []
        menu = ("Chaos: menu", "every failure this run can rehearse (key x)", "chaos_menu")
        kinds = [
            (f"Chaos: {s.title}", f"{s.kind}: {s.description} (asks first)", f"chaos('{s.kind}')")
            for s in offered
        ]
        return [menu, *kinds]

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
        values = request_values(request)
        doing = what_happens(request.kind, values, facts)
        shown = describe_values(spec, values)
        body = (
            f"Inject [b]{escape(spec.title)}[/b] into {escape(self.view.run_id)}: "
            f"{escape(doing)}.\n\n[$text-muted]{escape(spec.description)}"
            + (f"\n{escape(request.kind)}: {escape(shown)}" if shown else "")
            + "[/]"
        )

        def answered(ok: Ok) -> str:
            return f"{ok.result.get('chaos_id', '?')} injected: {doing}"

        self._confirm(
            f"Chaos: {spec.title}",
            body,
            lambda: self.send_request(Chaos(id=new_request_id(), request=request), answered, title="chaos"),
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
        if d is not None:
            self._approve(d)

    def action_clamp(self) -> None:
        d = self._directive()
        if d is not None:
            self._clamp(d)

    def action_reject(self) -> None:
        d = self._directive()
        if d is not None:
            self._reject(d)

    def _answer(self, answer: str | None, d: DirectiveView) -> None:
        """The answer picked in the directive detail (a, c, r) for the directive it showed."""
        answers = {"approve": self._approve, "clamp": self._clamp, "reject": self._reject}
        if answer in answers and self.refusal() is None:
            answers[answer](d)

    def _approve(self, d: DirectiveView) -> None:
        self._confirm(
            f"Approve {d.id}",
            f"Apply as the policy allows it:\n{render_changes(d)}",
            lambda: self.send_request(Approve(id=new_request_id(), directive_id=d.id), f"{d.id} approved"),
            yes="Approve",
        )

    def _clamp(self, d: DirectiveView) -> None:
        def clamped(values: ClampValues | None) -> None:
            if values:
                self.send_request(
                    Clamp(id=new_request_id(), directive_id=d.id, values=values),  # type: ignore[arg-type]
                    f"{d.id} clamped",
                )

        self.push_screen(ClampScreen(d), clamped)

    def _reject(self, d: DirectiveView) -> None:
        def rejected(reason: str | None) -> None:
            if reason:
                self.send_request(
                    Reject(id=new_request_id(), directive_id=d.id, reason=reason), f"{d.id} rejected"
                )

        self.push_screen(RejectScreen(d), rejected)

    def action_details(self) -> None:
        d = self._directive()
        if d is not None:
            screen = DirectiveScreen(d, self._clock, refusal=self.refusal())
            self.push_screen(screen, lambda answer: self._answer(answer, d))

    def reset_palette(self) -> list[tuple[str, str, str]]:
        """The palette's way back: one entry per directive field."""
        return [
            (
                f"Directive: reset {FIELD_LABELS[f]} to the run default",
                f"propose {f} at its configured value, in one directive (the policy checks it)",
                f"reset_field('{f}')",
            )
            for f in DIRECTIVE_FIELDS
        ]

    def action_reset_field(self, field: str) -> None:
        """Propose ``field`` back at its run default (the supervisor knows it), after asking."""
        label = FIELD_LABELS.get(field, field)
        body = (
            f"Propose {escape(label)} back at {escape(self.view.run_id)}'s configured default, in one "
            "directive. The policy checks it (a return to the default may go beyond its bounds) and "
            "it waits for your approval like any other."
        )
        request = Propose(id=new_request_id(), reset=[field], rationale="reset from the console")  # type: ignore[list-item]
        self._confirm(
            f"Reset {label}",
            body,
            lambda: self.send_request(request, f"{label} back to the run default: proposed"),
            yes="Propose",
        )

    def rollback_palette(self) -> list[tuple[str, str, str]]:
        """The palette's rollbacks: one entry per tag saved this session (the newest
        ``ROLLBACK_CHOICES``) before the newest step, skipping the steps since it."""
        step, tags = self.view.step, {}
        for event in self.view.events:
            saved = CheckpointSaved.of(event)
            if saved is not None and saved.tag and saved.step < step:
                tags[saved.tag] = saved.step
        newest = sorted(tags.items(), key=lambda item: item[1])[-ROLLBACK_CHOICES:]
        return [
            (
                f"Directive: roll back to {tag}",
                f"restart from step {at}, skipping the {step - at} steps of data since (policy-checked)",
                f"roll_back('{tag}', {step - at})",
            )
            for tag, at in reversed(newest)
        ]

    def action_roll_back(self, tag: str, skip_batches: int) -> None:
        """Propose a rollback to ``tag`` skipping ``skip_batches`` steps of data, after asking."""
        body = (
            f"Propose a rollback of {escape(self.view.run_id)} to {escape(tag)}, skipping "
            f"{skip_batches} steps of data after it. The policy checks it (the tag verifies, it is "
            "recent enough) and it waits for your approval; approved, the trainer restarts from the "
            "tag and the newer checkpoints are kept aside."
        )
        values = {"rollback": {"tag": tag, "skip_batches": skip_batches}}
        request = Propose(id=new_request_id(), values=values, rationale="rollback from the console")
        self._confirm(
            f"Roll back to {tag}",
            body,
            lambda: self.send_request(request, f"rollback to {tag}: proposed"),
            yes="Propose",
        )
