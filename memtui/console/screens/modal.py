"""The base of every box pushed over the main screen: one look and one way out.

A modal is a ``Vertical`` box, centred, as tall as its contents and never taller than the
screen, on the surface colour, its title and its close hint on the border; a long body
scrolls inside a ``VerticalScroll``. A screen says only what differs (its width, a border
colour for a question that does harm). Esc closes every modal, with ``CLOSED`` as its result;
a form (``FormModal``) submits on enter from any of its fields.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Input

ResultType = TypeVar("ResultType")


class Modal(ModalScreen[ResultType]):
    """A centred box over the main screen; esc closes it."""

    DEFAULT_CSS = """
    Modal { align: center middle; }
    Modal > Vertical {
        width: 80; max-width: 95%; height: auto; max-height: 100%; padding: 0 2;
        border: round $primary; background: $surface;
        border-title-color: $text-primary; border-subtitle-color: $text-muted;
    }
    Modal VerticalScroll { height: auto; max-height: 100%; }
    """
    BINDINGS: ClassVar[list[Binding | tuple[str, str] | tuple[str, str, str]]] = [
        Binding("escape", "close", "Close")
    ]
    CLOSED: ClassVar[object] = None
    """The result esc dismisses with (a question's is False: no)."""

    def action_close(self) -> None:
        self.dismiss(self.CLOSED)  # type: ignore[arg-type]


class FormModal(Modal[ResultType]):
    """A modal with fields: enter in any of them submits the form (``submit``)."""

    submit: Callable[[], None]
    """Dismiss with the form's value if it is good, else say what is wrong in the form: each
    form defines it (``__init_subclass__`` refuses a form class without one)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not callable(getattr(cls, "submit", None)):
            raise TypeError(f"{cls.__name__}: a FormModal defines submit()")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.submit()
