"""Themes as data: a TOML file -> validated ``ThemeSpec`` -> ``textual.theme.Theme``.

Theme files live in ``memtui/themes/`` (package data) and are read through
``importlib.resources``, so a wheel, an editable install and a source checkout all find them.
On the command line a theme is named by its file stem (``dark``, ``light``, ``ansi``).
``NO_COLOR`` needs nothing here: Textual reads it and renders in monochrome.
"""

from __future__ import annotations

import sys
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from textual.theme import Theme

DEFAULT_THEME = "dark"
_PACKAGE = "memtui.themes"


class ThemeError(ValueError):
    """A theme that does not exist or does not validate; the message says which and why."""


def _check_colour(value: str | None) -> str | None:
    if value is None:
        return value
    from textual.color import Color, ColorParseError

    try:
        Color.parse(value)
    except ColorParseError:
        raise ValueError(f"not a colour: {value!r}") from None
    return value


class ThemeColors(BaseModel):
    """Textual's base colours; the rest of the palette is derived from them."""

    model_config = ConfigDict(extra="forbid")

    primary: str
    secondary: str | None = None
    accent: str | None = None
    warning: str | None = None
    error: str | None = None
    success: str | None = None
    foreground: str | None = None
    background: str | None = None
    surface: str | None = None
    panel: str | None = None
    boost: str | None = None

    @field_validator("*")
    @classmethod
    def _is_colour(cls, value: str | None) -> str | None:
        return _check_colour(value)


class ThemeSpec(BaseModel):
    """One theme file."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=r"^[a-z0-9][a-z0-9-]*$")
    """Name registered with Textual (e.g. ``memtui-dark``)."""
    dark: bool = True
    ansi: bool = False
    """Use the terminal's own ANSI palette (colours named ``ansi_*``)."""
    colors: ThemeColors
    variables: dict[str, str] = Field(default_factory=dict)
    """Extra Textual design variables, e.g. ``footer-key-foreground``."""

    def to_theme(self) -> Theme:
        from textual.theme import Theme

        return Theme(
            name=self.name,
            dark=self.dark,
            ansi=self.ansi,
            variables=dict(self.variables),
            **self.colors.model_dump(),
        )


def available_themes() -> list[str]:
    """Stems of the installed theme files, sorted."""
    return sorted(
        entry.name.removesuffix(".toml")
        for entry in files(_PACKAGE).iterdir()
        if entry.name.endswith(".toml")
    )


@cache
def load_theme_spec(stem: str) -> ThemeSpec:
    """Read and validate ``themes/<stem>.toml``; ThemeError names the file and the key."""
    if stem not in available_themes():
        raise ThemeError(f"unknown theme {stem!r} (choose from {', '.join(available_themes())})")
    text = files(_PACKAGE).joinpath(f"{stem}.toml").read_text(encoding="utf-8")
    try:
        return ThemeSpec.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as err:
        raise ThemeError(f"theme {stem}: not valid TOML: {err}") from None
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        raise ThemeError(f"theme {stem}: {where}: {first['msg']}") from None


def load_theme(stem: str) -> Theme:
    return load_theme_spec(stem).to_theme()
