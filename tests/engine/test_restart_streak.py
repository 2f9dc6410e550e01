"""The restart rule on a fake clock: the first restart of a streak goes at once, later ones
back off, and a healthy stretch (progress) starts a new streak. Pure: no processes."""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.config.run_config import RestartConfig
from engine.supervisor.trainers.restart_policy import AttemptEnd, RestartDecision, Streak

KILLED = AttemptEnd(returncode=-9)
DEFAULTS = RestartConfig()


@dataclass
class Run:
    """A run's restarts on a fake clock: each failure advances it by the decided delay."""

    config: RestartConfig = field(default_factory=RestartConfig)
    streak: Streak = field(default_factory=Streak)
    now: float = 0.0  # s on the fake clock
    newest: int | None = None  # newest verified checkpoint's step
    furthest: int = -1  # furthest step reached
    restarted_at: list[float] = field(default_factory=list)

    def trains(self, to_step: int, saved: int | None = None) -> None:
        self.furthest = max(self.furthest, to_step)
        self.newest = saved if saved is not None else self.newest

    def fails(self) -> RestartDecision:
        failed_at = self.now
        decision = self.streak.judge(KILLED, self.newest, self.furthest, self.config)
        self.now += decision.delay_s
        self.restarted_at.append(self.now - failed_at)
        return decision


def test_the_first_restart_of_a_streak_goes_at_once_with_the_defaults() -> None:
    run = Run()
    run.trains(to_step=120, saved=100)
    first = run.fails()
    assert first.action == "restart" and first.streak == 1
    assert run.restarted_at == [0.0]


def test_restarts_without_progress_back_off_from_the_second_on() -> None:
    config = RestartConfig(backoff_initial_s=1.0, backoff_max_s=4.0, max_restarts=6)
    run = Run(config=config)
    run.trains(to_step=120, saved=100)
    for _ in range(5):  # a crash loop: the trainer never steps beyond 120 again
        run.fails()
    assert run.restarted_at == [0.0, 1.0, 2.0, 4.0, 4.0]
    assert run.fails().action == "restart" and run.fails().action == "end"  # the 7th: over the limit


def test_a_healthy_stretch_starts_a_new_streak() -> None:
    run = Run()
    run.trains(to_step=120, saved=100)
    run.fails()
    run.fails()  # no progress: backed off
    run.trains(to_step=121)  # a step beyond the furthest: healthy again
    again = run.fails()
    assert again.streak == 1
    run.trains(to_step=121, saved=120)  # a new checkpoint is progress too
    assert run.fails().streak == 1
    assert run.restarted_at == [0.0, DEFAULTS.backoff_initial_s, 0.0, 0.0]


def test_a_trainer_that_crashes_at_the_same_step_after_each_replay_is_still_a_streak() -> None:
    run = Run()
    run.trains(to_step=130, saved=100)
    delays = []
    for _ in range(3):
        run.trains(to_step=130)  # the replay reaches 130 again and crashes there
        delays.append(run.fails().delay_s)
    assert delays == [0.0, 1.0, 2.0]
