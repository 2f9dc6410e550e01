"""The run's tokens/s figures as a status and a report carry them (``engine.run.reports.throughput``
computes them from the store). Torch-free."""

from __future__ import annotations

from pydantic import AliasChoices, BaseModel, ConfigDict, Field


class ThroughputFigures(BaseModel):
    """Tokens/s over the whole run (every attempt, from the store) beside the current attempt's.

    An average is the tokens trained over the step time spent training them (the sum of
    ``step_time_s``): steps replayed after a restart count, since the machine did that work,
    and time outside steps (launches, restarts, pauses) does not. A peak is the best average
    of a window of at least ``window_steps`` consecutive steps of one attempt (not one noisy
    step); every step is in exactly one window (an attempt's partial blocks join their
    neighbour, an attempt shorter than a window is one), so an average, being a weighted
    mean of windows, is never above its peak. Keys name their unit; the unitless keys of
    older stores and supervisors (``run_avg``, ...) are still read."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_avg_tokens_per_s: float | None = Field(
        None, validation_alias=AliasChoices("run_avg_tokens_per_s", "run_avg")
    )
    """Tokens/s over every stored step of every attempt; None before the first step."""
    run_peak_tokens_per_s: float | None = Field(
        None, validation_alias=AliasChoices("run_peak_tokens_per_s", "run_peak")
    )
    """Best window of the run, tokens/s."""
    attempt: int = 0
    """The current attempt (the run's newest)."""
    attempt_avg_tokens_per_s: float | None = Field(
        None, validation_alias=AliasChoices("attempt_avg_tokens_per_s", "attempt_avg")
    )
    """Tokens/s over the current attempt's steps; None before its first step."""
    attempt_peak_tokens_per_s: float | None = Field(
        None, validation_alias=AliasChoices("attempt_peak_tokens_per_s", "attempt_peak")
    )
    """Best window of the current attempt, tokens/s."""
    window_steps: int = 0
    """Steps in a peak's window, the least (a partial block joins its neighbour)."""
    steps: int = 0
    """Stored step samples counted (every attempt, replays included)."""
    step_seconds: float = 0.0
    """Seconds of step time they took."""
