"""A chaos kind's parameters, as a form built from its spec (``ChaosKindSpec``).

An input per number (defaults filled in; a size takes ``64M``), a select per choice, each
with its bounds and help. Enter (from any field, a select's too, or Continue) checks every
value against the spec (``memtui.chaos.chaos_values``): a wrong one is refused in the form, naming
the field, and the form stays; a good set dismisses with the wire request, which the console then asks about
before sending. Esc cancels.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.markup import escape
from textual.widgets import Button, Input, Label, Select, Static

from engine.chaos.table import ChaosKindSpec, ChaosParamSpec, ChaosRequest
from memtui.chaos.chaos_values import ParamError, build_request, describe_bounds, format_value, is_size
from memtui.console.screens.modal import FormModal


class ChaosFormScreen(FormModal[ChaosRequest | None]):
    """One row per parameter; dismissed with the request, or None on esc."""

    DEFAULT_CSS = """
    ChaosFormScreen > Vertical {
        width: 84; max-height: 95%; padding: 1 2; border: round $error; border-title-color: $text-error;
    }
    ChaosFormScreen #description { margin-bottom: 1; }
    ChaosFormScreen Horizontal { height: auto; }
    ChaosFormScreen Label { width: 10; padding-top: 1; }
    ChaosFormScreen Input { width: 18; }
    ChaosFormScreen Select { width: 18; }
    ChaosFormScreen Input.-invalid { border: tall $error; }
    ChaosFormScreen .bounds { width: 1fr; padding-top: 1; color: $text-muted; }
    ChaosFormScreen .help { padding-left: 10; color: $text-muted; }
    ChaosFormScreen #error { color: $text-error; margin-top: 1; height: auto; }
    ChaosFormScreen #buttons { margin-top: 1; }
    ChaosFormScreen Button { margin-right: 2; }
    """
    BINDINGS = [
        # Before the focused field: a closed select would open again on enter.
        Binding("enter", "submit", "Continue", priority=True),
    ]

    def __init__(self, spec: ChaosKindSpec) -> None:
        super().__init__()
        self.spec = spec

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = f"Chaos: {self.spec.title}"
            yield Static(escape(self.spec.description), id="description")
            for param in self.spec.params:
                with Horizontal():
                    yield Label(param.name)
                    yield self._field(param)
                    yield Static(escape(describe_bounds(param)), classes="bounds")
                if param.help:
                    yield Static(escape(_help(param)), classes="help")
            yield Static(id="error")
            with Horizontal(id="buttons"):
                yield Button("Continue (enter)", id="continue", variant="error")
                yield Button("Cancel (esc)", id="cancel")

    @staticmethod
    def _field(param: ChaosParamSpec) -> Input | Select[str]:
        if param.type == "choice":
            options = [(c, c) for c in param.choices]
            return Select(options, value=str(param.default), allow_blank=False, id=f"param-{param.name}")
        return Input(format_value(param, param.default), id=f"param-{param.name}")

    def texts(self) -> dict[str, str]:
        """Each parameter's text as typed (a select's choice)."""
        texts = {}
        for param in self.spec.params:
            field = self.query_one(f"#param-{param.name}")
            value = field.value if isinstance(field, (Input, Select)) else None
            texts[param.name] = "" if value is None or value is Select.BLANK else str(value)
        return texts

    def submit(self) -> None:
        """Dismiss with the request if every value fits; else say which one does not."""
        for field in self.query(Input):
            field.remove_class("-invalid")
        try:
            request = build_request(self.spec, self.texts())
        except ParamError as err:
            self.query_one("#error", Static).update(escape(f"{err.field}: {err.message}"))
            if err.field in {p.name for p in self.spec.params}:
                invalid = self.query_one(f"#param-{err.field}")
                invalid.add_class("-invalid")
                invalid.focus()
            return
        self.dismiss(request)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Enter submits unless a button has focus (it presses it) or a select is open (it picks)."""
        if action == "submit":
            return not isinstance(self.focused, Button) and not any(s.expanded for s in self.query(Select))
        return True

    def action_submit(self) -> None:
        self.submit()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        if event.button.id == "continue":
            self.submit()
        else:
            self.dismiss(None)


def _help(param: ChaosParamSpec) -> str:
    suffix = " Sizes take K, M, G (binary): 64M." if is_size(param) else ""
    return param.help.replace("``", "") + suffix
