"""A directive's timing as the console words it: what ends it first, its TTL or the steps
after which the policy refuses it as stale, both said, neither made up."""

from __future__ import annotations

from engine.wire.protocol import DirectiveView
from memtui.console.directive_text import render_timing
from memtui.console.widgets.directives_panel import render_directives

NOW = 1_000_000.0


def view(**fields: object) -> DirectiveView:
    base: dict[str, object] = {"id": "d-1", "source": "rules", "created_at": NOW - 16, "step": 470}
    return DirectiveView.model_validate({**base, **fields})


def test_the_steps_to_staleness_come_before_the_ttl() -> None:
    d = view(expires_at=NOW + 283, stale_after_step=970)
    assert render_timing(d, NOW, step=907) == "age 16s, stale in 63 steps, expires in 4m43s"
    assert render_timing(d, NOW) == "age 16s, stale after step 970, expires in 4m43s"
    assert render_timing(d, NOW, step=971) == "age 16s, [$text-error]stale[/], expires in 4m43s"


def test_a_view_stored_before_the_stale_step_was_kept_says_only_its_ttl() -> None:
    assert render_timing(view(expires_at=NOW - 1), NOW, step=907) == "age 16s, [$text-error]expired[/]"


def test_the_panel_words_each_directive_with_the_runs_newest_step() -> None:
    text = render_directives([view(expires_at=NOW + 283, stale_after_step=970)], 0, NOW, 10, step=900)
    assert "stale in 70 steps" in text
