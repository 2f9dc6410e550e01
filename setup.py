"""The one thing setuptools is told here rather than in ``pyproject.toml``: the packages.

Everything under ``engine/`` and ``memtui/`` is found as usual, and the top-level ``themes/``
(console themes as TOML data) ships inside the wheel as ``memtui/themes/``, where
``memtui.theming`` finds it in an installed copy. ``pyproject.toml`` cannot say both:
``packages.find`` finds only directories that sit where their package name says, and a fixed
``packages`` list would have to grow with every new package.
"""

from __future__ import annotations

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["engine*", "memtui*"]), "memtui.themes"],
    package_dir={"memtui.themes": "themes"},
)
