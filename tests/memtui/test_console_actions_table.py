"""The actions table is the one list: a row added to it is a binding, a line in the key list
and a palette entry, and a read-only console hides and refuses it where it changes the run;
the running console's bindings, key list and palette are exactly what the table says."""

from __future__ import annotations

from engine.events import DirectiveProposed
from engine.run.directory import RunDir
from memtui.console.actions import (
    ACTIONS,
    LISTED,
    RUN_CHANGING,
    ConsoleAction,
    allowed,
    bindings,
    key_entries,
    listed,
)
from memtui.console.app import OFFLINE_REFUSAL, MemtuiApp
from memtui.console.main_screen import MainScreen
from memtui.console.palette import ConsoleCommands, entries
from memtui.console.run_view import RunView
from memtui.console.screens.confirm_screen import ConfirmScreen
from memtui.console.screens.keys_screen import KeysScreen
from tests.fakes.run_script import make_directive, make_event
from tests.waiting import until

NEW = ConsoleAction(
    "rewind", "Run", "rewind", "go back a little (asks first)", key="W", label="Rewind", changes_run=True
)
"""A row the table does not have: a request to the run on its own key."""


def test_a_new_row_is_a_binding_a_key_line_and_a_palette_entry() -> None:
    rows = (*ACTIONS, NEW)
    bound = {b.key: b.action for b in bindings(listed(rows))}
    assert bound["W"] == "app.rewind"  # the app's request, run from the main screen's keys
    assert ("W", "Rewind") in key_entries(listed(rows))
    titles = [r.title for r in entries(rows, RunView(), (), ())]
    assert "Run: rewind" in titles and "Run: rewind" not in [
        r.title for r in entries(ACTIONS, RunView(), (), ())
    ]


def test_a_new_row_that_changes_the_run_is_hidden_and_refused_read_only() -> None:
    rows = listed((*ACTIONS, NEW))
    refused = next(r for r in rows if r.method == "refused")
    assert "W" in refused.key.split(",")  # its key says at once why nothing happens
    assert allowed(NEW, refusal=None, paused=False)
    assert not allowed(NEW, refusal=OFFLINE_REFUSAL, paused=False)
    assert allowed(refused, refusal=OFFLINE_REFUSAL, paused=False)
    assert not allowed(refused, refusal=None, paused=False)


def history_app(run_dir: RunDir, *, readonly: bool) -> MemtuiApp:
    proposed = DirectiveProposed(directive=make_directive())
    view = RunView(run_id="r", connection="history").with_event(make_event(1, proposed))
    return MemtuiApp(run_dir, live=not readonly, view=view)


async def test_the_console_binds_lists_and_offers_what_the_table_says(run_dir: RunDir) -> None:
    app = history_app(run_dir, readonly=False)
    async with app.run_test(size=(120, 40)) as pilot:
        assert isinstance(app.screen, MainScreen)
        bound = {(b.key, b.action) for b in app.screen.BINDINGS}  # type: ignore[union-attr]
        assert {(r.key, r.target) for r in LISTED if r.key and r.bound} <= bound
        palette = [title for title, _, _ in app.palette_commands()]
        assert [
            r.title
            for r in ACTIONS
            if r.name and not r.family and not r.needs_chaos and r.method != "unpause"
        ] == [t for t in palette if t in {r.title for r in ACTIONS}]
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, KeysScreen), what="the key list")
        listed_keys = app.screen._keys  # type: ignore[attr-defined]
        assert ("a", "Approve") in listed_keys and ("ctrl+p", "Command palette") in listed_keys
        assert ("P", "Continue") not in listed_keys  # a running run pauses; it does not continue


async def test_read_only_hides_every_row_that_changes_the_run(run_dir: RunDir) -> None:
    app = history_app(run_dir, readonly=True)
    async with app.run_test(size=(120, 40)) as pilot:
        shown = {b.binding.action for b in app.active_bindings.values() if b.enabled}
        assert not {f"app.{m}" for m in RUN_CHANGING} & shown and "app.refused" in shown
        assert not [a for _, _, a in app.palette_commands() if a.split("(")[0] in RUN_CHANGING]
        await pilot.press("question_mark")
        await until(lambda: isinstance(app.screen, KeysScreen), what="the key list")
        labels = {label for _, label in app.screen._keys}  # type: ignore[attr-defined]
        assert not labels & {r.label for r in ACTIONS if r.changes_run}
        assert "Commands refused" in labels


async def test_a_palette_entry_runs_where_its_row_says(run_dir: RunDir) -> None:
    """The main screen's display actions and the app's requests, from the same palette."""
    app = history_app(run_dir, readonly=False)
    async with app.run_test(size=(120, 40)) as pilot:
        provider = ConsoleCommands(app.screen)
        hits = {str(hit.text): hit for hit in [h async for h in provider.discover()]}
        await hits["Display: freeze / unfreeze"].command()
        assert app.main.frozen
        await hits["Run: stop"].command()
        await until(lambda: isinstance(app.screen, ConfirmScreen), what="stop's question")
        await pilot.press("escape")
