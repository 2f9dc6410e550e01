"""The command palette (ctrl+p): every console action by name, read from the actions table.

Each row with a name is an entry; a family row (a chaos kind, a directive field back at its
default, a checkpoint to roll back to, a theme) is one entry per item the run has now
(``entries``). The app filters them as it filters its keys (read-only, pause), so a read-only
console lists no action that changes the run. Choosing one runs the action where its row
says (the app or the main screen), so it asks for confirmation exactly as its key does.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

from textual.command import DiscoveryHit, Hit, Hits, Provider

from engine.chaos.table import ChaosKindSpec
from engine.domain import DIRECTIVE_FIELDS
from engine.events import CheckpointSaved
from memtui.console.actions import BY_METHOD, ConsoleAction, method_of
from memtui.console.directive_text import FIELD_LABELS
from memtui.console.run_view import RunView

ROLLBACK_CHOICES = 3
"""Tags the palette offers to roll back to, newest first."""


def entries(
    rows: Iterable[ConsoleAction], view: RunView, offered: Sequence[ChaosKindSpec], themes: Sequence[str]
) -> list[ConsoleAction]:
    """Every palette entry, in the table's order: each named row, and each family's items."""
    items = {
        "reset_field": _reset_entries,
        "roll_back": lambda row: _rollback_entries(row, view),
        "chaos": lambda row: [
            row.entry(s.title, f"{s.kind}: {s.description} (asks first)", s.kind) for s in offered
        ],
        "set_theme": lambda row: [row.entry(stem, row.description, stem) for stem in themes],
    }
    listed = []
    for row in rows:
        if row.family:
            listed += items[row.method](row)
        elif row.name and not (row.needs_chaos and not offered):
            listed.append(row)
    return listed


def _reset_entries(row: ConsoleAction) -> list[ConsoleAction]:
    """The palette's way back: one entry per directive field."""
    return [
        row.entry(
            f"reset {FIELD_LABELS[f]} to the run default",
            f"propose {f} at its configured value, in one directive (the policy checks it)",
            f,
        )
        for f in DIRECTIVE_FIELDS
    ]


def _rollback_entries(row: ConsoleAction, view: RunView) -> list[ConsoleAction]:
    """One entry per tag saved this session (the newest ``ROLLBACK_CHOICES``) before the
    newest step, skipping the steps since it."""
    step, tags = view.step, {}
    for event in view.events:
        saved = CheckpointSaved.of(event)
        if saved is not None and saved.tag and saved.step < step:
            tags[saved.tag] = saved.step
    newest = sorted(tags.items(), key=lambda item: item[1])[-ROLLBACK_CHOICES:]
    return [
        row.entry(
            f"roll back to {tag}",
            f"restart from step {at}, skipping the {step - at} steps of data since (policy-checked)",
            tag,
            step - at,
        )
        for tag, at in reversed(newest)
    ]


class ConsoleCommands(Provider):
    """Directives, chaos, panels, export and theme commands."""

    def _commands(self) -> list[tuple[str, str, partial[Any]]]:
        app: Any = self.app  # MemtuiApp; typed loosely to keep this module free of app imports
        commands = app.palette_commands() if hasattr(app, "palette_commands") else []
        return [
            (title, help_text, partial(app.run_action, action, self._owner(action)))
            for title, help_text, action in commands
        ]

    def _owner(self, action: str) -> Any:
        row = BY_METHOD.get(method_of(action))
        return self.app.main if row is not None and row.owner == "main" else self.app  # type: ignore[attr-defined]

    async def discover(self) -> Hits:
        for title, help_text, run in self._commands():
            yield DiscoveryHit(title, run, help=help_text)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for title, help_text, run in self._commands():
            score = matcher.match(title)
            if score > 0:
                yield Hit(score, matcher.highlight(title), run, help=help_text)
