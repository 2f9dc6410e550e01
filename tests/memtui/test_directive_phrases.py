"""A directive's change reads from -> to (the value in effect -> the new value), says in
words where the policy allowed other than was asked, and the console and the CLI say it
with one formatter."""

from __future__ import annotations

import re

from engine.wire.protocol import DirectiveView
from memtui.cli.directives.directive_listing import render
from memtui.console.directive_text import render_changes
from memtui.directive_phrases import change_phrase, changes_text


def test_the_arrow_goes_from_the_value_in_effect_to_the_new_one() -> None:
    assert change_phrase("micro_batch_size", before=4, asked=8, allowed=8) == "micro-batch 4→8"
    assert change_phrase("lr_multiplier", before=1.0, asked=0.5, allowed=0.5) == "lr × 1→0.5"


def test_asked_and_allowed_are_words_where_they_differ() -> None:
    assert (
        change_phrase("micro_batch_size", before=4, asked=8, allowed=6)
        == "micro-batch 4→6 (asked 8, allowed 6)"
    )
    assert change_phrase("micro_batch_size", before=4, asked=8, allowed=None) == (
        "micro-batch 4, asked 8: not allowed"
    )


def test_a_view_stored_without_the_value_in_effect_has_no_arrow() -> None:
    assert change_phrase("lr_multiplier", before=None, asked=0.5, allowed=0.5) == "lr × 0.5"
    assert changes_text({}, {}, {}) == "no changes"


def test_console_and_cli_say_the_same_words() -> None:
    view = DirectiveView(
        id="d-1",
        source="rules",
        created_at=0.0,
        requested={"lr_multiplier": 0.5, "micro_batch_size": 8},
        allowed={"lr_multiplier": 0.5, "micro_batch_size": 6},
        in_effect={"lr_multiplier": 1.0, "micro_batch_size": 4},
    )
    console = re.sub(r"\[/?[^\]]*\]", "", render_changes(view))  # without the console's markup
    cli = render([view.model_dump(mode="json")]).splitlines()[1].strip()
    assert console == cli == "lr × 1→0.5  micro-batch 4→6 (asked 8, allowed 6)"
