"""Several nodes: the console's header says the wait at the rendezvous like any start-up
phase (the supervisor's ``waiting_for_nodes``), and the nodes' meeting ends it."""

from __future__ import annotations

from engine.domain import Event
from engine.events import NodesJoined, RendezvousWait, StartupPhase
from memtui.console.run_view import RunView
from memtui.console.widgets.run_header import render_header
from tests.fakes.run_script import make_event

WAIT = RendezvousWait(endpoint="node0:29500", rdzv_id="memtui-0123456789ab", nodes=2, node_rank=0, joined=1)
MET = NodesJoined(attempt=2, endpoint="node0:29500", rdzv_id="memtui-0123456789ab", nodes=2, waited_s=3.0)


def waiting(seq: int) -> Event:
    return make_event(seq, StartupPhase(phase="waiting_for_nodes", attempt=2, rendezvous=WAIT), attempt=2)


def test_the_header_says_node_0_waits_for_node_1() -> None:
    event = waiting(3)
    view = RunView(run_id="r", state="restarting").with_event(event)
    text = render_header(view, now=event.ts + 42)
    assert (
        "⧗ 42s waiting for node 1 at node0:29500 (1 of 2 nodes joined; rendezvous id memtui-0123456789ab)"
        in text
    )


def test_the_nodes_meeting_ends_the_wait_but_not_the_trainers_next_phase() -> None:
    view = RunView(run_id="r", state="restarting").with_event(waiting(3))
    assert view.with_event(make_event(4, MET, attempt=2)).startup_phase is None
    importing = make_event(4, StartupPhase(phase="importing", attempt=2), attempt=2)
    later = view.with_event(importing).with_event(make_event(5, MET, attempt=2)).startup_phase
    assert later is not None and later.phase == "importing"
