"""Several nodes meeting at the rendezvous: the wait, its end, and what a timed-out wait says.

Each node's supervisor launches torchrun, whose agent waits at node 0's endpoint until
every node has come under the same rendezvous id; only then are the ranks started. The
supervisor says the wait as the start-up phase ``waiting_for_nodes`` (``RendezvousWait``,
inside the ``startup_phase`` event), ``nodes_joined`` when the ranks start, and
``rendezvous_timed_out`` with one line naming the likely mismatch when the nodes did not
meet within ``train.rdzv_timeout_s``. The words are here, once, for every reader. Torch-free.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from engine.events.payload import Payload


class RendezvousWait(BaseModel):
    """One node's wait at the rendezvous, as far as its supervisor can see it."""

    model_config = ConfigDict(extra="allow")

    endpoint: str
    """``HOST:PORT`` on node 0 where the nodes meet."""
    rdzv_id: str
    """The id this node meets under (``engine.rendezvous``): the others must use the same."""
    nodes: int
    node_rank: int
    joined: int | None = None
    """Node 0: the most nodes whose torchrun was connected to its rendezvous store at once
    during this wait, itself included; None: the store does not listen yet (or cannot be seen)."""
    reached: bool | None = None
    """Another node: its torchrun was connected to node 0's endpoint during this wait."""
    timeout_s: float | None = None
    """Seconds the wait may last; None: no limit (node 0 stopped the run: its resume is awaited)."""

    def label(self) -> str:
        """``waiting for node 1 at HOST:PORT (1 of 2 nodes joined; rendezvous id ID)``."""
        progress = f"{self._progress()}; rendezvous id {self.rdzv_id}"
        return f"waiting for {self._awaited()} at {self.endpoint} ({progress})"

    def mismatch(self) -> str:
        """The one line a timed-out wait ends with: what was seen and the likely mismatch."""
        within = f"within {self.timeout_s or 0:g} s"
        here = f"this node's rendezvous id is {self.rdzv_id}"
        differ = "their training configs, train.nodes or train.rdzv_id differ"
        if self.node_rank > 0:
            if not self.reached:
                return (
                    f"node {self.node_rank} could not reach node 0 at {self.endpoint} {within}: "
                    f"node 0 not started, or started with another train.rdzv_endpoint ({here})"
                )
            missing = ", or another node has not joined" if self.nodes > 2 else ""
            return (
                f"node {self.node_rank} reached node 0 at {self.endpoint} but the group did not form "
                f"{within}: node 0 meets under another rendezvous id ({here}): {differ}{missing}"
            )
        if not self.joined:
            host, _, port = self.endpoint.rpartition(":")
            return (
                f"node 0's rendezvous at {self.endpoint} did not open {within} ({here}): "
                f"is {host} this host, and port {port} free?"
            )
        if self.joined < self.nodes:
            return (
                f"{self._awaited()} never joined at {self.endpoint} {within} ({self.joined} of "
                f"{self.nodes} nodes): not started, or started with another train.rdzv_endpoint ({here})"
            )
        return (
            f"all {self.nodes} nodes reached {self.endpoint} but did not agree {within}: another node "
            f"meets under another rendezvous id ({here}): {differ}"
        )

    def _awaited(self) -> str:
        if self.node_rank > 0:
            if self.timeout_s is None:
                return "node 0 to resume (it stopped the run)"
            return "node 0" if self.nodes == 2 else "node 0 and the other nodes"
        missing = self.nodes - (self.joined or 1)
        if missing <= 0:
            return "the nodes to agree"
        if self.nodes == 2:
            return "node 1"
        others = f"nodes 1-{self.nodes - 1}"
        return others if missing == self.nodes - 1 else f"{missing} of {others}"

    def _progress(self) -> str:
        if self.node_rank > 0:
            return "node 0 answered" if self.reached else "node 0 not reached yet"
        if self.joined is None:
            return "rendezvous not open yet"
        return f"{self.joined} of {self.nodes} nodes joined"


class NodesJoined(Payload):
    """The nodes met: torchrun started this node's ranks."""

    event_type = "nodes_joined"
    attempt: int
    endpoint: str
    rdzv_id: str
    nodes: int
    waited_s: float
    """Seconds from the attempt's launch to its ranks' start."""


class RendezvousTimedOut(Payload):
    """The nodes did not meet within the join timeout; the run ends (the message names the
    likely mismatch: ``RendezvousWait.mismatch``)."""

    event_type = "rendezvous_timed_out"
    severity = "critical"
    attempt: int
    wait: RendezvousWait
