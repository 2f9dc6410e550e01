"""planner = "command" in the real supervisor (with the fake trainer, which echoes what it
is sent): the fake planner's directive goes proposed -> pending -> approved by an operator
over the socket -> sent -> applied, and the store holds each event and each verdict."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from engine.config.config_file import build_run_config
from engine.run.directory import RunDir
from engine.run.storage.store import Store
from engine.wire.protocol import Approve
from memtui.cli.main import main as memtui_main
from tests.waiting import until

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]

FAKE_PLANNER = Path(__file__).resolve().parents[1] / "fakes" / "fake_planner.py"
SOURCE = f"command:{Path(sys.executable).name}"  # a command planner is named after its argv[0]


@pytest.fixture
def run(home: Path) -> RunDir:
    """Overrides conftest's run: a command planner asked every 50 steps (0.5 s at 100 Hz)."""
    policy = {
        "planner": "command",
        "planner_command": [sys.executable, str(FAKE_PLANNER), "good"],
        "planner_every_steps": 50,
    }
    return RunDir.create(build_run_config({"steps": 100, "policy": policy}), home=home)


def directive_event(type_: str, directive_id: str | None = None) -> Any:
    def match(m: Any) -> bool:
        if m.kind != "event" or m.event.type != type_:
            return False
        return directive_id is None or m.event.data["directive"]["id"] == directive_id

    return match


def stored(run: RunDir) -> tuple[list[Any], list[Any]]:
    """(events, decisions) in the store now."""
    with Store(run.store, readonly=True) as store:
        return store.events_since(0), [d for _, d in store.decisions()]


async def test_command_planner_directive_approved_over_the_socket_and_applied(
    run: RunDir, start, connect, fake_env, capsys: pytest.CaptureFixture[str]
) -> None:
    await start()
    client = await connect(replay_from=0)
    assert (await client.recv()).kind == "welcome"
    proposed, _ = await client.until(directive_event("directive_proposed"), timeout=30)
    view = proposed.event.data["directive"]
    directive_id = view["id"]
    assert view["source"] == SOURCE and view["state"] == "pending"
    assert view["requested"] == {"lr_multiplier": 2.0}
    assert view["allowed"] == {"lr_multiplier": 0.85}  # clamped to the policy's maximum
    assert proposed.event.data["verdict"]["decision"] == "clamp"

    ok, _ = await client.answer(Approve(id="op-1", directive_id=directive_id))
    assert ok.kind == "ok" and ok.result["directive"]["state"] == "approved"
    applied, _ = await client.until(directive_event("directive_applied", directive_id), timeout=20)
    assert applied.event.data["applied"] == {"lr_multiplier": 0.85}
    assert applied.event.data["directive"]["state"] == "applied"

    def mine(items: list[Any], key: Any) -> list[Any]:
        return [i for i in items if key(i) == directive_id]

    # Decisions are batched (flushed every 0.5 s): poll the store for both verdicts.
    events, decisions = await until(
        lambda: len(mine((found := stored(run))[1], lambda d: d.directive_id)) >= 2 and found,
        what=f"both verdicts on {directive_id} in the store",
        seen=lambda: stored(run)[1],
    )
    trail = mine([e for e in events if e.type.startswith("directive_")], lambda e: e.data["directive"]["id"])
    assert [(e.type, e.data["directive"]["state"]) for e in trail] == [
        ("directive_proposed", "pending"),
        ("directive_decided", "approved"),
        ("directive_applied", "applied"),
    ]
    approved = trail[1].data["verdict"]
    assert trail[2].data["decision_id"] == approved["decision_id"]  # applied under that verdict
    verdicts = mine(decisions, lambda d: d.directive_id)
    assert [(d.verdict, d.operator, d.state) for d in verdicts] == [
        ("clamp", None, "pending"),  # the policy clamped the planner's 2.0
        ("allow", "approve", "approved"),  # the operator approved; the re-check allowed it
    ]
    assert verdicts[1].decision_id == approved["decision_id"]
    assert all(d.source == SOURCE for d in verdicts)
    assert verdicts[1].patch == {"lr_multiplier": 0.85}
    assert verdicts[1].bounds["lr_multiplier"] == (0.05, 0.85)
    assert any("lr_multiplier" in reason for reason in verdicts[0].reasons)  # why it was clamped

    # The same verdicts through the CLI: memtui directives RUN --decisions --json
    capsys.readouterr()
    code = memtui_main(["directives", str(run.path), "--decisions", "--directive", directive_id, "--json"])
    listed = json.loads(capsys.readouterr().out)  # one JSON document
    assert code == 0 and [row["state"] for row in listed] == ["pending", "approved"]
