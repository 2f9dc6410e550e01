"""What a confirmation needs to know of one run to say what an injection will really do to
it: the checkpoints a resume could load (the catalog's full verification) and the restart
settings. Read from the run directory (the console and the CLI run beside it); torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.checkpoints.standing import standing_of
from engine.config.config_file import ConfigError
from engine.run.directory import RunDir


@dataclass(frozen=True)
class RunFacts:
    verified_steps: tuple[int, ...]
    """Steps of the checkpoints that verify in full, newest first: a resume loads the first."""
    on_disk: int
    """Committed checkpoints, those that do not verify included."""
    on_preemption: bool
    """``restart.on_preemption``: a trainer that stops itself on SIGTERM is restarted."""
    max_restarts: int
    """``restart.max_restarts``: 0 never restarts."""


def run_facts(run: RunDir) -> RunFacts | None:
    """The facts of ``run`` now; None when its config cannot be read (the words then stay
    general). Hashes any checkpoint not verified before in this process: seconds for a
    large new one."""
    try:
        restart = run.read_config().restart
    except ConfigError:
        return None
    standing = standing_of(run.checkpoints)
    return RunFacts(
        verified_steps=tuple(step for step, _ in standing.verified),
        on_disk=standing.on_disk,
        on_preemption=restart.on_preemption,
        max_restarts=restart.max_restarts,
    )
