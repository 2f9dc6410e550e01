"""The directive detail shows the planner's evidence and, once applied, the measured effect."""

from __future__ import annotations

from engine.directive_effect import DirectiveEffect, EffectWindow
from engine.wire.protocol import DirectiveView
from memtui.console.screens.directive_screen import render_details

EFFECT = DirectiveEffect(
    applied_step=450,
    steps=100,
    before=EffectWindow(
        first_step=351, last_step=450, loss_slope=-2.1e-4, tokens_per_s=5210.0, mem_peak=300 << 20
    ),
    after=EffectWindow(first_step=451, last_step=550, loss_slope=-5e-5, tokens_per_s=5380.0, overflows=1),
)


def view(**over: object) -> DirectiveView:
    fields: dict[str, object] = {
        "id": "d-1",
        "source": "rules",
        "created_at": 0.0,
        "requested": {"lr_multiplier": 0.7},
        "allowed": {"lr_multiplier": 0.7},
        "evidence": ["loss slope -0.000322/step over the last 200 steps", "lr 0.0024 at multiplier 1"],
    }
    return DirectiveView.model_validate({**fields, **over})


def test_the_detail_lists_the_evidence_and_no_effect_before_it_is_applied() -> None:
    text = render_details(view(), now=10.0)
    assert "evidence" in text and "· loss slope -0.000322/step over the last 200 steps" in text
    assert "[$text-muted]effect[/]" not in text and "before -> after" not in text


def test_the_detail_shows_the_effect_once_measured() -> None:
    text = render_details(view(state="applied", effect=EFFECT), now=10.0)
    assert (
        "over 100 steps before -> after step 450: loss slope -2.10e-04 -> -5.00e-05/step, "
        "tokens/s 5,210 -> 5,380, overflows 0 -> 1, peak 300.0 MiB -> -"
    ) in text


def test_the_detail_shows_each_fields_value_in_effect_beside_asked_and_allowed() -> None:
    text = render_details(view(in_effect={"lr_multiplier": 1.0}), now=10.0)
    assert "in effect     asked   allowed" in text
    assert "lr ×                  1       0.7       0.7" in text
