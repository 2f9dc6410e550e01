"""The alert list (key A): one row per alert episode, firing ones on top, newest first
below, a filter for the firing ones, live as alerts arrive."""

from __future__ import annotations

from typing import Any

from textual.content import Content

from engine.domain import Event
from engine.run.directory import RunDir
from memtui.console.alert_timeline import alert_episodes
from memtui.console.app import MemtuiApp
from memtui.console.run_view import MAX_EVENTS, RunView
from memtui.console.screens.alerts_screen import AlertsScreen, render_alert_list
from memtui.console.screens.keys_screen import KeysScreen
from tests.fakes.run_script import make_event
from tests.fakes.scripted_engine import ScriptedEngine, welcome_for
from tests.waiting import until

T0 = 1_700_000_000.0


def alert(
    seq: int, rule: str, at: float, *, state: str = "firing", severity: str = "warning", **over: Any
) -> Event:
    message = f"resolved: {rule}" if state == "resolved" else over.pop("message", f"{rule} is bad")
    return make_event(
        seq,
        "alert",
        message,
        ts=T0 + at,
        severity="info" if state == "resolved" else severity,
        data={"rule": rule, "state": state},
        **over,
    )


def history() -> list[Event]:
    """disk_low fired and resolved; heartbeat fired (critical), reminded, still firing;
    gpu_temperature.0 fired (warning), still firing; a note in between."""
    return [
        alert(1, "disk_low", 0, message="disk 96% full"),
        alert(2, "heartbeat", 60, severity="critical", message="no step for 120 s"),
        make_event(3, "note", "unrelated", ts=T0 + 70),
        alert(4, "disk_low", 120, state="resolved"),
        alert(5, "heartbeat", 360, severity="critical", message="no step for 420 s"),
        alert(6, "gpu_temperature.0", 400, message="GPU 0 at 86 C"),
    ]


def plain(markup: str) -> str:
    return Content.from_markup(markup).plain


def test_episodes_fold_reminders_and_resolutions_firing_first() -> None:
    episodes = alert_episodes(history())
    assert [(e.rule, e.firing) for e in episodes] == [
        ("heartbeat", True),  # critical before warning among the firing
        ("gpu_temperature.0", True),
        ("disk_low", False),
    ]
    heartbeat, _, disk = episodes
    assert heartbeat.reminders == 1 and heartbeat.message == "no step for 420 s"
    assert heartbeat.duration_s(T0 + 600) == 540 and disk.duration_s(T0 + 600) == 120
    assert disk.severity == "warning" and disk.message == "disk 96% full"  # not the "resolved" info


def test_a_resolution_without_its_firing_is_still_listed() -> None:
    (episode,) = alert_episodes([alert(9, "heartbeat", 5, state="resolved")])
    assert not episode.firing and episode.started_at is None and episode.duration_s(T0) is None


def test_a_restart_is_an_instant_never_left_firing() -> None:
    restarts = [alert(1, "restart", 10, message="trainer restarted: killed"), alert(2, "restart", 90)]
    episodes = alert_episodes(restarts)
    assert [(e.rule, e.firing, e.duration_s(T0 + 600)) for e in episodes] == [
        ("restart", False, 0.0),
        ("restart", False, 0.0),
    ]
    assert episodes[0].started_at == T0 + 90  # newest first, each restart its own row


def test_list_shows_time_severity_rule_state_and_message_and_filters() -> None:
    text = plain(render_alert_list(alert_episodes(history()), T0 + 600))
    lines = text.splitlines()
    assert lines[0].split() == ["TIME", "SEVERITY", "RULE", "STATE", "MESSAGE"]
    assert "critical" in lines[1] and "heartbeat" in lines[1] and "firing for 9m00s" in lines[1]
    assert "no step for 420 s ×2" in lines[1]
    assert "gpu_temperature.0" in lines[2] and "firing for 3m20s" in lines[2]
    assert "disk_low" in lines[3] and "resolved after 2m00s" in lines[3] and "disk 96% full" in lines[3]
    firing = plain(render_alert_list(alert_episodes(history()), T0 + 600, firing_only=True))
    assert "disk_low" not in firing and "heartbeat" in firing
    assert "no firing alerts" in plain(render_alert_list([], 0.0, firing_only=True))
    assert "no alerts yet" in plain(render_alert_list([], 0.0))


def test_view_keeps_alerts_that_other_events_pushed_out_of_the_log() -> None:
    view = RunView().with_event(alert(1, "disk_low", 0))
    for seq in range(2, MAX_EVENTS + 10):
        view = view.with_event(make_event(seq))
    assert all(e.type != "alert" for e in view.events)
    assert [e.seq for e in view.alerts] == [1]


async def test_alert_list_opens_updates_live_and_filters(live_run: RunDir) -> None:
    clock = {"now": T0 + 600}
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), events=history()) as fake:
        app = MemtuiApp(live_run, clock=lambda: clock["now"])
        async with app.run_test(size=(140, 40)) as pilot:
            await until(lambda: app.view.last_seq == 6)
            await pilot.press("A")
            screen = app.screen
            assert isinstance(screen, AlertsScreen)
            assert "heartbeat" in plain(screen.text) and "firing for 9m00s" in plain(screen.text)
            fake.add_event(
                "alert", "resolved: heartbeat", ts=T0 + 610, data={"rule": "heartbeat", "state": "resolved"}
            )
            fake.add_event(
                "alert",
                "NaN loss",
                severity="critical",
                ts=T0 + 615,
                data={"rule": "nan_loss", "state": "firing"},
            )
            clock["now"] = T0 + 620
            await until(
                lambda: "NaN loss" in plain(screen.text) and "resolved after 9m10s" in plain(screen.text)
            )
            lines = plain(screen.text).splitlines()
            assert "nan_loss" in lines[1] and "firing for 5.0s" in lines[1]  # the newest firing on top
            assert "2 firing · 4 in all" in str(screen.query_one("Vertical").border_title)
            await pilot.press("f")
            assert "heartbeat" not in plain(screen.text) and "disk_low" not in plain(screen.text)
            assert "firing only" in str(screen.query_one("Vertical").border_title)
            await pilot.press("escape")
            assert not isinstance(app.screen, AlertsScreen)
            await pilot.press("question_mark")
            assert isinstance(app.screen, KeysScreen) and ("A", "Alerts") in app.screen._keys
            await pilot.press("escape")
            assert "Alerts: list" in [c[0] for c in app.palette_commands()]


LOOP = "engine/trainer/loop.py"
STACKS = {
    "attempt": 1,
    "rule": "heartbeat",
    "files": {"0": "stacks/x-rank0.txt", "1": "stacks/x-rank1.txt"},
    "where": {
        "1": "engine/trainer/loop.py:236 in train_step",
        "0": "engine/trainer/loop.py:240 in train_step",
    },
    "stopped": [1],
}


def test_a_heartbeat_alert_shows_where_each_rank_was_when_its_stacks_were_collected() -> None:
    events = [
        *history(),
        make_event(7, "stacks_collected", "stacks of 2 of 2 ranks", ts=T0 + 410, data=STACKS),
    ]
    episodes = alert_episodes(events)
    assert episodes[0].rule == "heartbeat" and episodes[1].where == ()  # only the heartbeat's
    lines = plain(render_alert_list(episodes, T0 + 600)).splitlines()
    at = next(i for i, line in enumerate(lines) if "heartbeat" in line)
    assert [line.split("↳ ")[1] for line in lines[at + 1 : at + 3]] == [
        f"rank 0: {LOOP}:240 in train_step",
        f"rank 1: {LOOP}:236 in train_step (was stopped)",
    ]


async def test_the_console_alert_list_shows_where_each_rank_was(live_run: RunDir) -> None:
    clock = {"now": T0 + 600}
    async with ScriptedEngine(live_run.socket, welcome_for(live_run.run_id), events=history()) as fake:
        app = MemtuiApp(live_run, clock=lambda: clock["now"])
        async with app.run_test(size=(140, 40)) as pilot:
            await until(lambda: app.view.last_seq == 6)
            for seq in range(7, 7 + 60):  # chatty events never push the stacks out
                fake.add_event("note", f"note {seq}", ts=T0 + 400)
            fake.add_event("stacks_collected", "stacks of 2 of 2 ranks", ts=T0 + 410, data=STACKS)
            await pilot.press("A")
            screen = app.screen
            assert isinstance(screen, AlertsScreen)
            await until(lambda: "rank 1: " in plain(screen.text))
            assert f"↳ rank 1: {LOOP}:236 in train_step (was stopped)" in plain(screen.text)
