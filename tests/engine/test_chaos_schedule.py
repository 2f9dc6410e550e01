"""The chaos schedule: a pure function of the seed, the weights and the mean interval."""

from __future__ import annotations

from collections import Counter
from itertools import islice

from engine.chaos.config import ChaosConfig
from engine.chaos.table import KINDS
from engine.supervisor.chaos.schedule import next_after, schedule


def drawn(config: ChaosConfig, n: int) -> list[tuple[int, str]]:
    return [(s.step, s.kind) for s in islice(schedule(config), n)]


def test_the_same_seed_gives_the_same_schedule_and_another_seed_another() -> None:
    config = ChaosConfig(kinds={"kill": 1, "nan_loss": 1, "slow_steps": 1}, every_steps=100, seed=7)
    assert drawn(config, 200) == drawn(config.model_copy(), 200)
    other = config.model_copy(update={"seed": 8})
    assert drawn(config, 200) != drawn(other, 200)


def test_steps_increase_with_the_mean_gap_and_kinds_follow_their_weights() -> None:
    config = ChaosConfig(kinds={"kill": 1, "nan_loss": 3}, every_steps=50, seed=1)
    draws = drawn(config, 4000)
    steps = [step for step, _ in draws]
    assert all(b > a for a, b in zip(steps, steps[1:], strict=False))
    assert 45 < steps[-1] / len(steps) < 55  # mean gap near every_steps
    share = Counter(kind for _, kind in draws)["nan_loss"] / len(draws)
    assert 0.70 < share < 0.80  # weight 3 of 4


def test_every_kind_is_attacked_once_per_deck() -> None:
    kinds = dict.fromkeys(KINDS, 1.0) | {"kill": 2.0}
    config = ChaosConfig(kinds=kinds, every_steps=10, seed=3)  # type: ignore[arg-type]
    deck = len(KINDS) + 1  # kill twice
    draws = [kind for _, kind in drawn(config, 3 * deck)]
    for start in range(0, len(draws), deck):
        dealt = Counter(draws[start : start + deck])
        assert set(dealt) == set(KINDS) and dealt["kill"] == 2
    assert draws[:deck] != draws[deck : 2 * deck]  # each deck shuffled anew


def test_no_kinds_no_schedule() -> None:
    assert drawn(ChaosConfig(), 5) == []
    assert next_after(ChaosConfig(), 0) is None


def test_a_resumed_run_goes_on_with_the_same_schedule() -> None:
    config = ChaosConfig(kinds={"kill": 1, "oom": 1}, every_steps=10, seed=3)
    draws = list(islice(schedule(config), 50))
    middle = draws[20].step
    after = next_after(config, middle)
    assert after == draws[21]
    assert next_after(config, middle - 1) == draws[20]
