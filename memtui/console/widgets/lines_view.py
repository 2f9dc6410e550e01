"""Markup text that repaints line by line: a new step changes a few figures, not the box.

``LinesView`` is a ``Static`` for several lines of console markup (a panel's figures, the
header). Textual repaints a ``Static`` whole on every ``update``: it parses all of its markup,
renders every line and sends every cell to the terminal. Here an update with as many lines
as before refreshes only the lines whose markup changed, and each is parsed and rendered on
its own; the other lines keep their rendered strips. A different number of lines (``height:
auto``) or any other refresh (resize, theme, focus) renders the whole text again, as
``Static`` would. Each line must be markup on its own: a style opened on one line is closed
on it (every renderer here writes lines that way).
"""

from __future__ import annotations

from textual.content import Content
from textual.geometry import Region
from textual.strip import Strip
from textual.visual import Visual, VisualType
from textual.widgets import Static


class LinesView(Static):
    """Lines of markup, each re-rendered only when its own markup changes."""

    def __init__(self, *, classes: str | None = None, id: str | None = None) -> None:
        super().__init__(markup=True, classes=classes, id=id)
        self._lines: list[str] = [""]
        self._whole: Content | None = None  # the whole text parsed, for sizing and readers
        self._strips: dict[int, Strip] = {}  # content line -> rendered strip
        self._strips_width = -1  # cells the strips were rendered for

    @property
    def visual(self) -> Visual:
        """The whole text as one ``Content`` (what ``Static.visual`` gives)."""
        if self._whole is None:
            self._whole = Content.from_markup("\n".join(self._lines))
        return self._whole

    def update(self, content: VisualType = "", *, layout: bool = True) -> None:
        """Show ``content`` (markup); with as many lines as before only the changed lines
        repaint, and ``layout`` is not needed (the height is the number of lines)."""
        if not isinstance(content, str):
            raise TypeError(f"LinesView shows markup text, not {type(content).__name__}")
        lines = content.split("\n")
        width = self.size.width
        if len(lines) != len(self._lines) or not width:
            self._lines, self._whole = lines, None
            self._strips.clear()
            self.refresh(layout=True)
            return
        changed = [y for y, (old, new) in enumerate(zip(self._lines, lines, strict=True)) if old != new]
        if not changed:
            return
        self._lines, self._whole = lines, None
        for y in changed:
            self._strips.pop(y, None)
            self.refresh(Region(0, y, width, 1))

    def render_line(self, y: int) -> Strip:
        """Line ``y`` of the content, from its own markup (rendered again only when dirty)."""
        if self.text_selection is not None:  # a selection spans lines: the whole text, as Static
            if self._strips_width != -1:  # rendered line by line until now
                self._strips_width = -1
                self._render_content()
            return super().render_line(y)
        self._forget_dirty()
        strip = self._strips.get(y)
        if strip is None:
            strip = self._strips[y] = self._render_one(y)
        return strip

    def _forget_dirty(self) -> None:
        """Drop the strips of the lines refreshed since the last render by anyone (a resize,
        a theme, focus: all of them) and all of them when the width changed."""
        width = self.size.width
        if width != self._strips_width:
            self._strips.clear()
            self._strips_width = width
        if self._dirty_regions:
            top = self.content_offset.y  # dirty regions are in the widget's coordinates
            for region in self._dirty_regions:
                for y in range(region.y - top, region.bottom - top):
                    self._strips.pop(y, None)
            self._dirty_regions.clear()

    def _render_one(self, y: int) -> Strip:
        width = self.size.width
        if not 0 <= y < len(self._lines):
            return Strip.blank(width, self.visual_style.rich_style)
        line = Content.from_markup(self._lines[y])
        strips = Visual.to_strips(self, line, width, 1, self.visual_style)
        return strips[0] if strips else Strip.blank(width, self.visual_style.rich_style)
