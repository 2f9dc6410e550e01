"""Training's intra-op threads while the supervisor asks it to leave cores to other work
(``engine.wire.protocol.CoreShare``: a spare trainer warming up, the supervisor's DeepSpeed op
survey; ``engine.supervisor.trainers.core_loans``).

On a CPU host every core is training's (``engine.cpu_share``), and torch's intra-op threads
wait for each other at every op: one other busy process, whatever its priority, takes a
core from one of them and the others wait for it. Measured on the 2-core development
machine: ``tiny``'s 45 ms steps took about 1.5 s while a spare imported torch and DeepSpeed
next to them (at nice 19 or SCHED_IDLE alike). With one thread fewer, the step only loses the
missing core's work. Applied at the step boundary, never inside a step; on a GPU the
threads only feed the device, and nothing changes.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger(__name__)


class CoreShare:
    """Sets torch's intra-op threads to ``threads - cores_for_others`` (at least 1) at each
    step boundary where the asked share changed; ``threads``: what training has on its own."""

    def __init__(self, threads: int, set_threads: Callable[[int], None], enabled: bool) -> None:
        self.threads = threads
        self.set_threads = set_threads
        """``torch.set_num_threads`` (a test's recorder)."""
        self.enabled = enabled
        """False on a GPU: the share is ignored."""
        self.left = 0
        """Cores left to other work now."""

    def at_boundary(self, cores_for_others: int) -> None:
        """Before a step: follow the supervisor's latest ask."""
        if not self.enabled or cores_for_others == self.left:
            return
        wanted = max(1, self.threads - cores_for_others)
        self.set_threads(wanted)
        self.left = cores_for_others
        log.info("intra-op threads %d (%d cores left to other work)", wanted, cores_for_others)
