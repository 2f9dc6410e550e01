"""Tokens/s over the whole run and over its current attempt, from the store's steps.

One aggregate query over the ``steps`` table (no step row reaches Python) sums tokens and
step seconds per block of ``WINDOW_STEPS`` consecutive steps of one attempt (blocks aligned
on the step number, so a block never straddles a restart). A ``ThroughputTally`` keeps
those sums and reads only the rows stored since its last look, so the supervisor answers
every status of a million-step run without a full scan. A step's tokens are
``tokens_per_s * step_time_s`` (the trainer's own per-step figure): an average weighs each
step by its time, and a replayed step counts, since the machine did that work again.
Average and peak are over the same windows (``_windows``), so the peak is never below.
Torch-free.
"""

from __future__ import annotations

import sqlite3

from engine.domain import ThroughputFigures
from engine.run.storage.store import Store

WINDOW_STEPS = 50
"""Steps in a peak's window: long enough that one fast step is not a peak."""

# Sums per (attempt, block) of the rows with id in (after, upto].
_BLOCKS = (
    "SELECT attempt, (step - 1) / ?, COUNT(*), SUM(tokens_per_s * step_time_s), SUM(step_time_s)"
    " FROM steps WHERE id > ? AND id <= ? GROUP BY attempt, (step - 1) / ?"
)


class ThroughputTally:
    """Running sums of the store's steps per attempt and per window block."""

    def __init__(self, window_steps: int = WINDOW_STEPS) -> None:
        self.window_steps = window_steps
        self._seen_id = 0
        # (attempt, block) -> [steps, tokens, seconds]
        self._blocks: dict[tuple[int, int], list[float]] = {}

    def update(self, store: Store) -> ThroughputTally:
        """Add the rows stored since the last update."""
        top = store.query("SELECT COALESCE(MAX(id), 0) FROM steps")
        upto = int(top[0][0]) if top else 0
        if upto <= self._seen_id:
            return self
        w = self.window_steps
        for attempt, block, n, tok, sec in store.query(_BLOCKS, (w, self._seen_id, upto, w)):
            sums = self._blocks.setdefault((int(attempt), int(block)), [0, 0.0, 0.0])
            sums[0] += n
            sums[1] += float(tok or 0.0)
            sums[2] += float(sec or 0.0)
        self._seen_id = upto
        return self

    def figures(self) -> ThroughputFigures:
        """Run-wide and current-attempt averages and peaks of what was read so far."""
        if not self._blocks:
            return ThroughputFigures(window_steps=self.window_steps)
        per_attempt: dict[int, list[list[float]]] = {}
        for (attempt, _), sums in sorted(self._blocks.items()):
            per_attempt.setdefault(attempt, []).append(sums)
        windows = {a: _windows(blocks, self.window_steps) for a, blocks in per_attempt.items()}
        best = {a: max((tok / sec for _, tok, sec in w if sec > 0), default=None) for a, w in windows.items()}
        totals = {a: [sum(col) for col in zip(*w, strict=True)] for a, w in windows.items()}
        current = max(per_attempt)
        tokens = sum(t[1] for t in totals.values())
        seconds = sum(t[2] for t in totals.values())
        _, cur_tok, cur_sec = totals[current]
        peaks = [p for p in best.values() if p is not None]
        return ThroughputFigures(
            run_avg_tokens_per_s=tokens / seconds if seconds > 0 else None,
            run_peak_tokens_per_s=max(peaks) if peaks else None,
            attempt=current,
            attempt_avg_tokens_per_s=cur_tok / cur_sec if cur_sec > 0 else None,
            attempt_peak_tokens_per_s=best[current],
            window_steps=self.window_steps,
            steps=int(sum(t[0] for t in totals.values())),
            step_seconds=seconds,
        )


def _windows(blocks: list[list[float]], window_steps: int) -> list[list[float]]:
    """One attempt's blocks (in step order) as windows of at least ``window_steps`` steps:
    a partial block (a restart's first, the newest) joins the window before it, or the
    one after where it is the first. Every step counts once, so the attempt's average is
    a time-weighted mean of its windows' and never above the best of them."""
    windows: list[list[float]] = []
    short: list[float] | None = None  # a partial head, waiting for the next block
    for n, tok, sec in blocks:
        block = [n, tok, sec] if short is None else [n + short[0], tok + short[1], sec + short[2]]
        short = None
        if block[0] >= window_steps or not windows:
            if block[0] < window_steps:
                short = block  # too short to stand alone and nothing before it
            else:
                windows.append(block)
        else:
            windows[-1] = [a + b for a, b in zip(windows[-1], block, strict=True)]
    if short is not None:  # the whole attempt is shorter than a window: it is one
        windows.append(short)
    return windows


def throughput_of(store: Store, window_steps: int = WINDOW_STEPS) -> ThroughputFigures:
    """Run-wide and current-attempt tokens/s from every stored step of ``store``."""
    return ThroughputTally(window_steps).update(store).figures()


def throughput_or_none(store: Store, tally: ThroughputTally | None = None) -> ThroughputFigures | None:
    """The figures (``tally`` brought up to date, or a full read), or None where the store
    cannot be read (a status still answers)."""
    try:
        return (tally or ThroughputTally()).update(store).figures()
    except sqlite3.Error:
        return None
