"""Every console action once: its key, its words, where it runs and when it may.

The key bindings, the key list (``?``), the command palette and the read-only filter are
all read from ``ACTIONS`` (harlequin keeps such a table): a new row is a new key in the
footer (where ``show``), a new line in the key list, a new palette entry (where it has a
``name``) and, where it ``changes_run``, one more thing a read-only console hides and refuses.

Each row names the method it calls (``action_<method>``) and the object that has it: the
app (``"app"``: the connection, the view and the requests to the run) or the main screen
(``"main"``: the panels and what they show). Rows whose entries depend on the run (a chaos
kind, a directive field, a checkpoint to roll back to, a theme) are families: the row says
what they share, ``ConsoleAction.entry`` makes each entry.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from textual.binding import Binding

Owner = Literal["app", "main"]
"""Where an action's method is: the app, or the main screen."""

PANEL_KEYS: dict[str, str] = {
    "1": "memory",
    "2": "throughput",
    "3": "numerics",
    "4": "directives",
    "5": "events",
    "6": "hardware",
    "7": "metrics",
}
"""The key that shows or hides each panel (by its widget id)."""


@dataclass(frozen=True)
class ConsoleAction:
    """One thing the console does, and everything each list says about it."""

    action: str
    """What Textual runs: the method's name without ``action_``, with its arguments if any
    (``toggle_panel('memory')``)."""
    group: str = ""
    """The palette's prefix (``Directive``, ``Run``, ``Panel``...); none for ``Detach``."""
    name: str = ""
    """The palette's title after the group; "" keeps the action out of the palette."""
    description: str = ""
    """The palette's help line."""
    key: str = ""
    """Textual key names, comma-separated (``question_mark,f1``); "" for a palette-only action."""
    label: str = ""
    """The footer's and the key list's word for it (``Approve``)."""
    key_display: str | None = None
    """How the key list and the footer write the key, where Textual's name is not it."""
    show: bool = True
    """In the footer (the key list shows every key)."""
    owner: Owner = "app"
    changes_run: bool = False
    """A request to the run: refused, and hidden everywhere, in a read-only console."""
    while_paused: bool | None = None
    """Offered only while the run is paused (True) or only while it is not (False)."""
    needs_chaos: bool = False
    """In the palette only when the run offers chaos (its key still says why not)."""
    family: bool = False
    """A template: the palette lists its ``entry``s, never the row itself."""
    bound: bool = True
    """False: Textual binds the key itself (the palette's ctrl+p); only listed."""

    @property
    def method(self) -> str:
        return method_of(self.action)

    @property
    def title(self) -> str:
        """The palette's title: ``Directive: approve``."""
        return f"{self.group}: {self.name}" if self.group else self.name

    @property
    def target(self) -> str:
        """The action as the main screen's bindings run it (``app.`` for the app's)."""
        return f"app.{self.action}" if self.owner == "app" else self.action

    def entry(self, name: str, description: str, *args: object) -> ConsoleAction:
        """One palette entry of a family: this row with its arguments, title and help."""
        action = f"{self.method}({', '.join(repr(a) for a in args)})"
        return dataclasses.replace(self, action=action, name=name, description=description, family=False)

    def binding(self) -> Binding:
        return Binding(self.key, self.target, self.label, show=self.show, key_display=self.key_display)


def method_of(action: str) -> str:
    """``app.toggle_panel('memory')`` -> ``toggle_panel``: the method an action string calls."""
    return action.split("(")[0].rsplit(".", 1)[-1]


def _panel_rows() -> tuple[ConsoleAction, ...]:
    return tuple(
        ConsoleAction(
            f"toggle_panel({name!r})",
            "Panel",
            f"toggle {name}",
            f"key {key}",
            key=key,
            label=f"Toggle {name}",
            show=False,
            owner="main",
        )
        for key, name in PANEL_KEYS.items()
    )


ACTIONS: tuple[ConsoleAction, ...] = (
    ConsoleAction("detach", "", "Detach", "close the console; the run goes on", key="q", label="Detach"),
    ConsoleAction("keys", key="question_mark,f1", label="Keys", key_display="?", owner="main"),
    ConsoleAction(
        "approve",
        "Directive",
        "approve",
        "apply the selected directive as the policy allows",
        key="a",
        label="Approve",
        changes_run=True,
    ),
    ConsoleAction(
        "clamp",
        "Directive",
        "clamp",
        "edit the selected directive's values",
        key="c",
        label="Clamp",
        changes_run=True,
    ),
    ConsoleAction(
        "reject",
        "Directive",
        "reject",
        "refuse the selected directive with a reason",
        key="r",
        label="Reject",
        changes_run=True,
    ),
    ConsoleAction(
        "details",
        "Directive",
        "details",
        "everything about the selected directive",
        key="enter",
        label="Details",
        show=False,
    ),
    ConsoleAction("cursor(1)", key="down", label="Next directive", key_display="↓", show=False, owner="main"),
    ConsoleAction(
        "cursor(-1)", key="up", label="Previous directive", key_display="↑", show=False, owner="main"
    ),
    ConsoleAction("reset_field", "Directive", changes_run=True, family=True),
    ConsoleAction("roll_back", "Directive", changes_run=True, family=True),
    ConsoleAction(
        "stop",
        "Run",
        "stop",
        "stop the run gracefully (asks first)",
        key="s",
        label="Stop run",
        changes_run=True,
    ),
    ConsoleAction(
        "pause",
        "Run",
        "pause training",
        "hold at the next step boundary; nothing is lost (key P)",
        key="P",
        label="Pause",
        changes_run=True,
        while_paused=False,
    ),
    ConsoleAction(
        "unpause",
        "Run",
        "continue training",
        "let the paused run go on (key P)",
        key="P",
        label="Continue",
        changes_run=True,
        while_paused=True,
    ),
    ConsoleAction("kill_trainer", key="k", label="Kill trainer", show=False, changes_run=True),
    ConsoleAction(
        "chaos_menu",
        "Chaos",
        "menu",
        "every failure this run can rehearse (key x)",
        key="x",
        label="Chaos",
        show=False,
        changes_run=True,
        needs_chaos=True,
    ),
    ConsoleAction("chaos", "Chaos", changes_run=True, needs_chaos=True, family=True),
    ConsoleAction(
        "freeze",
        "Display",
        "freeze / unfreeze",
        "pause drawing; data keeps arriving",
        key="f",
        label="Freeze",
        owner="main",
    ),
    ConsoleAction(
        "window",
        "Charts",
        "next window",
        "last 5 min / last hour / whole run",
        key="w",
        label="Window",
        owner="main",
    ),
    ConsoleAction(
        "event_filter",
        "Events",
        "next filter",
        "all, alerts, decisions, checkpoints, ...",
        key="e",
        label="Filter",
        show=False,
        owner="main",
    ),
    ConsoleAction(
        "maximize",
        "Panel",
        "maximise / restore",
        "the focused panel fills the screen",
        key="z",
        label="Maximise",
        show=False,
        owner="main",
    ),
    ConsoleAction(
        "save_svg",
        "Export",
        "screenshot (SVG)",
        "into the run directory's screenshots/",
        key="p",
        label="Screenshot",
        show=False,
        owner="main",
    ),
    ConsoleAction("next_theme", key="t", label="Theme", show=False),
    ConsoleAction("set_theme", "Theme", description="switch the palette", family=True),
    ConsoleAction(
        "checkpoints",
        "Checkpoints",
        "list",
        "tag, step, size, age, verified (key C)",
        key="C",
        label="Checkpoints",
        show=False,
        owner="main",
    ),
    ConsoleAction(
        "alerts",
        "Alerts",
        "list",
        "every alert, firing ones on top; f: firing only (key A)",
        key="A",
        label="Alerts",
        show=False,
        owner="main",
    ),
    ConsoleAction(
        "endurance",
        "Endurance",
        "report",
        "steps, throughput, OOMs, chaos, resumes, from the store (key E)",
        key="E",
        label="Endurance",
        show=False,
        owner="main",
    ),
    *_panel_rows(),
    ConsoleAction("command_palette", key="ctrl+p", label="Command palette", show=False, bound=False),
)
"""Every action, in the order the footer, the key list and the palette list them."""


def _refused_row(rows: Iterable[ConsoleAction]) -> ConsoleAction:
    """A read-only console's stand-in for every key that changes the run: it says at once
    why nothing happens (the keys themselves are hidden there)."""
    keyed = [r for r in rows if r.changes_run and r.key]
    keys = dict.fromkeys(k for r in keyed for k in r.key.split(","))
    shown = dict.fromkeys(r.key.split(",")[0] for r in keyed if r.show)
    return ConsoleAction(
        "refused", key=",".join(keys), label="Commands refused", key_display=" ".join(shown), show=False
    )


def listed(rows: Iterable[ConsoleAction] = ACTIONS) -> tuple[ConsoleAction, ...]:
    """The rows and their read-only stand-in, in the order of the footer and the key list
    (the keys Textual binds itself last)."""
    rows = tuple(rows)
    ours = tuple(r for r in rows if r.bound)
    return (*ours, _refused_row(rows), *(r for r in rows if not r.bound))


LISTED = listed()
BY_METHOD: dict[str, ConsoleAction] = {r.method: r for r in LISTED}
"""Each method's row (the rows of one method share their owner and what they may do)."""
RUN_CHANGING = frozenset(r.method for r in ACTIONS if r.changes_run)
"""Methods that change the run: hidden and refused in a read-only console."""


def allowed(row: ConsoleAction, *, refusal: str | None, paused: bool) -> bool:
    """Whether ``row`` is offered and runs now: a read-only console (``refusal``) neither shows
    nor runs what changes the run, and only then its stand-in; of key P's two, the one that
    fits the run's state (pause a running run, continue a paused one)."""
    if row.method == "refused":
        return refusal is not None
    if row.changes_run and refusal is not None:
        return False
    return row.while_paused is None or row.while_paused == paused


def bindings(rows: Iterable[ConsoleAction] = LISTED) -> list[Binding]:
    """The main screen's bindings: each keyed row's, the app's through ``app.``."""
    return [r.binding() for r in rows if r.key and r.bound]


def key_entries(rows: Iterable[ConsoleAction]) -> list[tuple[str, str]]:
    """``(key, label)`` for the key list: how each keyed row's key is written."""
    return [(r.key_display or r.key.split(",")[0], r.label) for r in rows if r.key]
