from __future__ import annotations

from pathlib import Path

import pytest

from engine.run.directory import RunDir
from memtui.cli.main import main
from memtui.theming import (
    BUILTIN_DIRS,
    ThemeError,
    ThemeSpec,
    available_themes,
    builtin_theme_dir,
    load_theme,
    load_theme_spec,
    skipped_themes,
)

NEON = """
name = "neon-nights"
dark = true

[colors]
primary = "#ff00ff"
background = "#000000"
"""


def write_user_theme(home: Path, stem: str, text: str) -> Path:
    path = home / "themes" / f"{stem}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text)
    return path


def test_bundled_themes_validate_and_convert(home: Path) -> None:
    assert available_themes() == ["ansi", "dark", "light"]
    themes = {stem: load_theme(stem) for stem in available_themes()}
    assert themes["dark"].dark and not themes["light"].dark
    assert themes["ansi"].ansi and themes["ansi"].primary.startswith("ansi_")
    assert {t.name for t in themes.values()} == {"memtui-dark", "memtui-light", "memtui-ansi"}
    assert skipped_themes() == ()


def test_the_themes_are_read_from_the_top_level_themes_directory() -> None:
    # Tests run from the checkout: memtui/ holds no themes, the repository's themes/ does.
    repository = Path(__file__).resolve().parents[2]
    assert builtin_theme_dir() == repository / "themes" == BUILTIN_DIRS[1]
    assert not (repository / "memtui" / "themes").exists()


def test_unknown_theme_names_the_choices(home: Path) -> None:
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


async def test_a_user_theme_is_offered_and_applied(home: Path, run_dir: RunDir) -> None:
    from memtui.cli.parser import build_parser
    from memtui.console.app import MemtuiApp

    write_user_theme(home, "neon", NEON)
    assert available_themes() == ["ansi", "dark", "light", "neon"]
    assert load_theme("neon").primary == "#ff00ff" and skipped_themes() == ()
    assert build_parser().parse_args(["attach", "--theme", "neon"]).theme == "neon"

    app = MemtuiApp(run_dir, live=False, theme_name="neon")
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.theme == "neon-nights"
        assert ("Theme: neon", "switch the palette", "set_theme('neon')") in app.palette_commands()
        app.action_set_theme("dark")
        assert app.theme == "memtui-dark"


BROKEN = {
    "blurple": NEON.replace('primary = "#ff00ff"', 'primary = "blurple"'),
    "typo": NEON.replace("[colors]", "[colours]"),
    "unclosed": 'name = "unclosed\n',
    "dark": NEON,  # a built-in stem: the built-in wins
    "twin": NEON.replace("neon-nights", "memtui-light"),  # a built-in's Textual name
    "my theme": NEON.replace("neon-nights", "my-theme"),  # not a name to type after --theme
}


async def test_a_broken_user_theme_is_reported_and_skipped(
    home: Path, run_dir: RunDir, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    paths = {stem: write_user_theme(home, stem, text) for stem, text in BROKEN.items()}
    write_user_theme(home, "neon", NEON)

    assert available_themes() == ["ansi", "dark", "light", "neon"]
    reasons = {skipped.path: skipped.reason for skipped in skipped_themes()}
    assert set(reasons) == set(paths.values())
    assert (
        reasons[paths["blurple"]].startswith("colors.primary: ")
        and "not a colour" in reasons[paths["blurple"]]
    )
    assert reasons[paths["typo"]].startswith("colors: Field required")
    assert reasons[paths["unclosed"]].startswith("not valid TOML: ")
    assert "built-in theme 'dark'" in reasons[paths["dark"]] and "wins" in reasons[paths["dark"]]
    assert reasons[paths["twin"]].startswith("name: 'memtui-light'")
    assert reasons[paths["my theme"]].startswith("file name: ")
    assert load_theme("dark").name == "memtui-dark"

    # --theme: the good ones still parse; a broken one is an argument error naming file and field.
    from memtui.cli.parser import build_parser

    assert build_parser().parse_args(["--theme", "dark"]).theme == "dark"
    with pytest.raises(SystemExit) as info:
        main(["attach", "--theme", "blurple"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{paths['blurple']}: colors.primary:" in err

    # The console opens with the rest; the CLI names each skipped file on stderr first.
    import memtui.console.app

    opened: list[str] = []

    class Console:
        return_code = 0

        def __init__(self, run: RunDir, **options: object) -> None:
            opened.append(str(options["theme_name"]))

        def run(self) -> None:
            pass

    with monkeypatch.context() as patch:
        patch.setattr(memtui.console.app, "MemtuiApp", Console)
        assert main(["attach", run_dir.run_id, "--theme", "neon"]) == 0
    assert opened == ["neon"]
    lines = capsys.readouterr().err.splitlines()
    assert lines == [f"memtui: skipping theme file {paths[s]}: {reasons[paths[s]]}" for s in sorted(BROKEN)]

    app = memtui.console.app.MemtuiApp(run_dir, live=False, theme_name="neon")
    async with app.run_test() as pilot:
        await pilot.pause()
        assert app.theme == "neon-nights"
        seen = set()
        for _ in available_themes():  # the theme key cycles through the usable themes only
            app.action_next_theme()
            seen.add(app.theme)
        assert seen == {"memtui-ansi", "memtui-dark", "memtui-light", "neon-nights"}
