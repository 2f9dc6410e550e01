"""Themes as data: a TOML file -> validated ``ThemeSpec`` -> ``textual.theme.Theme``.

Theme files come from two places:

- memtui's own, the repository's top-level ``themes/``. An installed copy has them as package
  data in ``memtui/themes/`` (``setup.py`` maps the one onto the other); a source checkout and
  an editable install read the repository's directory.
- the user's, ``$MEMTUI_HOME/themes/*.toml``, validated like memtui's own. A user file that
  does not validate is skipped, never fatal: ``skipped_themes()`` names the file and the field,
  the CLI prints that, and the console simply does not offer it. A built-in theme wins over a
  user file of the same stem, so ``--theme dark`` always means the palette memtui ships and the
  default can never be broken by a file in the home; the user file is reported as skipped.

On the command line a theme is named by its file stem (``dark``, ``light``, ``ansi``, ``mine``).
``NO_COLOR`` needs nothing here: Textual reads it and renders in monochrome.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from engine.run.directory import memtui_home

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

if TYPE_CHECKING:
    from textual.theme import Theme

DEFAULT_THEME = "dark"
_PACKAGE_DIR = Path(__file__).resolve().parent
BUILTIN_DIRS = (_PACKAGE_DIR / "themes", _PACKAGE_DIR.parent / "themes")
"""Where memtui's own theme files are, first match wins: the package data of an installed
copy, else the repository's top-level ``themes/`` (a source checkout or an editable install)."""
STEM_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]*$")
"""A theme's file stem is typed on the command line and quoted in palette actions."""


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


@dataclass(frozen=True)
class SkippedTheme:
    """A user theme file left out, and why (the field, or what else is wrong with it)."""

    path: Path
    reason: str

    def __str__(self) -> str:
        return f"skipping theme file {self.path}: {self.reason}"


@dataclass(frozen=True)
class ThemeCatalog:
    """Every usable theme by stem (built-in and the user's), and the user files skipped."""

    specs: Mapping[str, ThemeSpec]
    skipped: tuple[SkippedTheme, ...]


def builtin_theme_dir() -> Path:
    """The first of ``BUILTIN_DIRS`` that holds theme files."""
    for directory in BUILTIN_DIRS:
        if any(directory.glob("*.toml")):
            return directory
    raise ThemeError(
        f"no theme files in {' or '.join(map(str, BUILTIN_DIRS))}: memtui is not installed whole"
    )


def user_theme_dir() -> Path:
    """``$MEMTUI_HOME/themes/``: the operator's own theme files."""
    return memtui_home() / "themes"


def theme_catalog() -> ThemeCatalog:
    """The themes offered now; read once per user directory (a process sees one home)."""
    return _catalog(builtin_theme_dir(), user_theme_dir())


@cache
def _catalog(builtin_dir: Path, user_dir: Path) -> ThemeCatalog:
    specs = _builtin_specs(builtin_dir)
    owners = {spec.name: stem for stem, spec in specs.items()}  # Textual name -> stem
    skipped: list[SkippedTheme] = []
    for path in _user_files(user_dir):
        try:
            spec = _user_spec(path, specs, owners)
        except ThemeError as err:
            skipped.append(SkippedTheme(path, str(err)))
            continue
        specs[path.stem] = spec
        owners[spec.name] = path.stem
    return ThemeCatalog(MappingProxyType(specs), tuple(skipped))


def _builtin_specs(builtin_dir: Path) -> dict[str, ThemeSpec]:
    """memtui's own themes by stem; one that does not validate is memtui's bug, so it raises."""
    specs = {}
    for path in sorted(builtin_dir.glob("*.toml")):
        try:
            specs[path.stem] = _read_spec(path)
        except ThemeError as err:
            raise ThemeError(f"built-in theme file {path}: {err}") from None
    return specs


def _user_spec(path: Path, specs: Mapping[str, ThemeSpec], owners: Mapping[str, str]) -> ThemeSpec:
    """One user file, validated; ThemeError says why it cannot join the themes read so far."""
    if path.stem in specs:
        raise ThemeError(f"the built-in theme {path.stem!r} has this name and wins; rename the file")
    if not STEM_PATTERN.match(path.stem):
        raise ThemeError("file name: use letters, digits, '-' and '_' only (it is typed after --theme)")
    spec = _read_spec(path)
    if spec.name in owners:
        raise ThemeError(f"name: {spec.name!r} is already the name of theme {owners[spec.name]!r}")
    return spec


def _user_files(user_dir: Path) -> list[Path]:
    try:
        return sorted(user_dir.glob("*.toml"))
    except OSError:  # an unreadable home offers memtui's own themes only
        return []


def _read_spec(path: Path) -> ThemeSpec:
    """Read and validate one theme file; ThemeError says what is wrong (TOML, or which field)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ThemeError(f"cannot read it: {err}") from None
    try:
        return ThemeSpec.model_validate(tomllib.loads(text))
    except tomllib.TOMLDecodeError as err:
        raise ThemeError(f"not valid TOML: {err}") from None
    except ValidationError as err:
        first, *rest = err.errors()
        where = ".".join(str(p) for p in first["loc"]) or "(the file)"
        more = f" (and {len(rest)} more)" if rest else ""
        raise ThemeError(f"{where}: {first['msg']}{more}") from None


def available_themes() -> list[str]:
    """Stems of every usable theme, built-in and the user's, sorted."""
    return sorted(theme_catalog().specs)


def skipped_themes() -> tuple[SkippedTheme, ...]:
    """The user's theme files left out, each with the reason."""
    return theme_catalog().skipped


def load_theme_spec(stem: str) -> ThemeSpec:
    """The validated theme ``stem``; ThemeError names the choices, or why that file was skipped."""
    catalog = theme_catalog()
    if stem in catalog.specs:
        return catalog.specs[stem]
    for skipped in catalog.skipped:
        if skipped.path.stem == stem:
            raise ThemeError(f"theme {stem!r} cannot be used: {skipped.path}: {skipped.reason}")
    raise ThemeError(f"unknown theme {stem!r} (choose from {', '.join(sorted(catalog.specs))})")


def load_theme(stem: str) -> Theme:
    return load_theme_spec(stem).to_theme()
