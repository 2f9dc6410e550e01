from __future__ import annotations

import pytest

from memtui.theming import ThemeError, ThemeSpec, available_themes, load_theme, load_theme_spec


def test_bundled_themes_validate_and_convert() -> None:
    assert available_themes() == ["ansi", "dark", "light"]
    themes = {stem: load_theme(stem) for stem in available_themes()}
    assert themes["dark"].dark and not themes["light"].dark
    assert themes["ansi"].ansi and themes["ansi"].primary.startswith("ansi_")
    assert {t.name for t in themes.values()} == {"memtui-dark", "memtui-light", "memtui-ansi"}


def test_unknown_theme_names_the_choices() -> None:
    with pytest.raises(ThemeError, match="choose from ansi, dark, light"):
        load_theme_spec("neon")


def test_bad_colour_and_unknown_keys_are_refused() -> None:
    with pytest.raises(ValueError, match="not a colour"):
        ThemeSpec.model_validate({"name": "x", "colors": {"primary": "blurple"}})
    with pytest.raises(ValueError, match="extra"):
        ThemeSpec.model_validate({"name": "x", "colors": {"primary": "#fff", "primry": "#fff"}})


@pytest.mark.parametrize("stem", ["dark", "light", "ansi"])
async def test_app_runs_with_each_theme(stem: str, run_dir) -> None:  # type: ignore[no-untyped-def]
    from memtui.console.app import MemtuiApp

    app = MemtuiApp(run_dir, live=False, theme_name=stem)
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.theme == f"memtui-{stem}"
