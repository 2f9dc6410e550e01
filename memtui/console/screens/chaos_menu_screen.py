"""The chaos menu: the failures this run can rehearse, exactly the kinds its supervisor
advertises (``Welcome.chaos``). Enter picks one (its form, or straight to the confirmation
for a kind without parameters); esc backs out."""

from __future__ import annotations

from collections.abc import Sequence

from textual.app import ComposeResult
from textual.containers import Vertical
from textual.markup import escape
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from engine.chaos.table import ChaosKindSpec
from memtui.console.screens.modal import Modal


def option_prompt(spec: ChaosKindSpec) -> str:
    """``title  kind · by whom`` as content markup: one line per kind."""
    return f"[b]{escape(spec.title)}[/b]  [$text-muted]{spec.kind} · by the {spec.performer}[/]"


class ChaosMenuScreen(Modal[str | None]):
    """One option per offered kind; dismissed with the chosen kind, or None. The list takes
    at most 45% of the terminal's rows and scrolls beyond: at 80x24 the description and the
    hint under it stay on screen (a fixed 16 rows pushed both out)."""

    DEFAULT_CSS = """
    ChaosMenuScreen > Vertical {
        width: 76; max-height: 90%; padding: 1 2; border: round $error; border-title-color: $text-error;
    }
    ChaosMenuScreen OptionList { height: auto; max-height: 45vh; }
    ChaosMenuScreen #about { margin-top: 1; height: auto; }
    """

    def __init__(self, specs: Sequence[ChaosKindSpec]) -> None:
        super().__init__()
        self.specs = list(specs)
        """The offered kinds, in the supervisor's order."""

    def compose(self) -> ComposeResult:
        with Vertical() as box:
            box.border_title = "Chaos: rehearse a failure"
            yield OptionList(*(Option(option_prompt(s), id=s.kind) for s in self.specs))
            yield Static(id="about")
            yield Static("[$text-muted]enter chooses (then asks first) · esc cancels[/]")

    def on_mount(self) -> None:
        options = self.query_one(OptionList)
        options.highlighted = 0
        options.focus()

    def on_option_list_option_highlighted(self, event: OptionList.OptionHighlighted) -> None:
        spec = next((s for s in self.specs if s.kind == event.option.id), None)
        if spec is not None:
            self.query_one("#about", Static).update(escape(spec.description))

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        self.dismiss(event.option.id)
