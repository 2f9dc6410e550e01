"""bench/compare.py's controller part, torch-free: what it names the halving side and where
it sets the budget. The children (real training) are replaced by records of their shape."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import budget_runs  # noqa: E402  (bench/ is not a package: it goes on sys.path first)

MIB = 2**20
# Peaks (MiB) of the tiny setup's static micro-batches, as measured on the CPU: 16 and 32
# at global batch 64, 64 and up at 256.
TINY_PEAKS = {8: 387, 16: 410, 32: 452, 64: 532, 128: 686, 256: 770}
# What a halving run records of what ran it, written out (budget_runs.halving_record's shape)
OURS = {"loop": "halving loop (accelerate not installed)", "accelerate_version": None}


def load_compare() -> Any:
    spec = importlib.util.spec_from_file_location("bench_compare", BENCH / "compare.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def fake_child(peaks: dict[int, int], budgets: list[int], halving: dict[str, Any] = OURS) -> Any:
    """A child that answers with records of each part's shape; notes every budget it is given."""

    def child(part: str, **params: Any) -> dict[str, Any]:
        if part == "static":
            m = params["micro_batch"]
            return {"micro_batch": m, "samples_s": 900.0 + m, "peak_bytes": peaks[m] * MIB}
        budgets.append(params["budget"])
        fits = max(m for m, p in peaks.items() if p * MIB <= params["budget"])
        if part == "adaptive":
            return {
                "samples_s": 950.0,
                "micro_batch": fits,
                "steps": 60,
                "adaptations": [],
                "steady_step_s": None,
            }
        assert part == "accelerate"
        tried = [m for m in sorted(peaks, reverse=True) if m >= fits]
        return {"samples_s": 900.0, "micro_batch": fits, "tried": tried, **halving}

    return child


def two_rounds(compare: Any) -> Any:
    return dataclasses.replace(compare.FULL, rounds=2)


@pytest.fixture
def no_accelerate(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "accelerate", None)  # ``import accelerate`` raises ImportError


def test_without_accelerate_the_halving_loop_is_named_as_such_never_accelerate(
    no_accelerate: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    compare = load_compare()
    monkeypatch.setattr(compare, "child", fake_child(TINY_PEAKS, [], budget_runs.halving_record()))
    rows = compare.setup_rows(two_rounds(compare), "tiny")
    texts = [f"{row.figure} | {row.a} | {row.b}" for row in rows]
    fallback = budget_runs.FALLBACK_LOOP
    assert any(fallback in text for text in texts), texts
    assert not [t for t in texts if "accelerate" in t.replace(fallback, "")], texts


def test_the_record_names_the_accelerate_that_ran_and_its_version(
    no_accelerate: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert budget_runs.halving_record() == {"loop": budget_runs.FALLBACK_LOOP, "accelerate_version": None}
    installed = types.ModuleType("accelerate")
    installed.__version__ = "1.15.0"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "accelerate", installed)
    assert budget_runs.halving_record() == {"loop": "accelerate 1.15.0", "accelerate_version": "1.15.0"}


def test_records_that_do_not_say_what_ran_them_are_not_called_accelerate() -> None:
    compare = load_compare()
    # the shape of the halving runs in docs/bench/compare-controller-2026-11-30.json
    old = [{"samples_s": 900.1, "micro_batch": 16, "tried": [64, 32, 16], "accelerate": False}]
    with pytest.raises(ValueError, match="'loop'"):
        compare.halving_name(old)


def test_the_tiny_budget_leaves_the_best_static_size_a_tenth_of_margin(
    no_accelerate: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    compare = load_compare()
    budgets: list[int] = []
    monkeypatch.setattr(compare, "child", fake_child(TINY_PEAKS, budgets))
    rows = compare.setup_rows(two_rounds(compare), "tiny")
    best = next(row for row in rows if row.figure.startswith("best static samples/s"))
    best_m = int(best.a.split()[-1])  # "static M"
    assert set(budgets) == {budgets[0]}, budgets  # one budget for every run of the setup
    assert budgets[0] >= 1.10 * TINY_PEAKS[best_m] * MIB, (best_m, budgets[0] / MIB)


def test_a_budget_the_next_size_also_fits_under_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    compare = load_compare()
    close = {**TINY_PEAKS, 128: 560}  # 64 at 532: a budget 12 % over it lets 128 in
    monkeypatch.setattr(compare, "child", fake_child(close, []))
    with pytest.raises(RuntimeError, match="tiny: micro-batch 128 peaks at 560 MiB"):
        compare.setup_rows(two_rounds(compare), "tiny")
