"""What the supervisor itself does for its chaos kinds besides signals: corrupting the newest
verified checkpoint, and a hostile planner storm.

A corruption flips ``FLIPPED_BYTES`` in the middle of the newest verified tag's largest
file, its size unchanged (so a quick check still passes it, and only a full verification,
as a resume does, finds it). A storm hands N hostile planner replies, cycling through
``HOSTILE_REPLIES`` (malformed JSON, the wrong shape, unknown fields, wrong types,
out-of-bounds values), to the directive queue through the same ``hand_over`` a planner's
reply takes: the policy refuses each and stores the verdict. Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.checkpoints import catalog
from engine.checkpoints.selection import select_newest_verified
from engine.directives.planners.external import hand_over
from engine.directives.planners.reply import parse_reply
from engine.directives.queue import DirectiveQueue

FLIPPED_BYTES = 64  # bytes inverted in the middle of the file
STORM_SOURCE = "chaos:planner_storm"
HOSTILE_REPLIES = (
    "{not json",
    "[1, 2, 3]",
    '"lr_multiplier"',
    '{"temperature": 1.0}',
    '{"lr_multiplier": "faster"}',
    '{"lr_multiplier": -3}',
    '{"micro_batch_size": 0}',
    '{"micro_batch_size": 2.5}',
    '{"gradient_clip_norm": -1}',
    '{"loss_scale_initial_power": 10000}',
    '{"lr_multiplier": 1, "rationale": 7}',
    '{"a": ' * 200 + "1" + "}" * 200,
    '{"lr_multiplier": 1e400}',
)
"""Replies no policy may admit: each is refused at the edge or by the policy."""


@dataclass(frozen=True)
class Corruption:
    tag: str
    step: int
    file: str
    """The damaged file, relative to ``checkpoints/``."""


def corruption_target(checkpoints: Path) -> Corruption | None:
    """The newest verified tag (quick check) and its largest file; None when there is none."""
    chosen = select_newest_verified(catalog.verdicts_newest_first(checkpoints, "quick")).chosen
    if chosen is None:
        return None
    files = [p for p in chosen.path.rglob("*") if p.is_file() and p.name != "manifest.json"]
    if not files:
        return None
    largest = max(files, key=lambda p: p.stat().st_size)
    return Corruption(chosen.tag, chosen.step, str(largest.relative_to(checkpoints)))


def corrupt(checkpoints: Path, target: Corruption) -> None:
    """Invert ``FLIPPED_BYTES`` in the middle of the target file (its size unchanged)."""
    path = checkpoints / target.file
    middle = path.stat().st_size // 2
    with open(path, "r+b") as f:
        f.seek(middle)
        chunk = f.read(FLIPPED_BYTES)
        f.seek(middle)
        f.write(bytes(b ^ 0xFF for b in chunk))


def storm(queue: DirectiveQueue, count: int, first: int = 0) -> tuple[int, int]:
    """Hand ``count`` hostile replies to ``queue`` (the ``first``-th of the cycle first);
    returns (refused, admitted)."""
    refused = admitted = 0
    for i in range(first, first + count):
        entry = hand_over(queue, STORM_SOURCE, parse_reply(HOSTILE_REPLIES[i % len(HOSTILE_REPLIES)]))
        if entry is not None and entry.state == "rejected":
            refused += 1
        else:
            admitted += 1
    return refused, admitted
