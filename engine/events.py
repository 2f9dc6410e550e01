"""Every event type a run records, and the typed payloads of the events that code reads.

Torch-free: the trainer, the supervisor and the console all read it.
"""

from __future__ import annotations

INSTANT_RULES = frozenset({"restart"})
"""Rules that mark an instant, never a standing state: no "resolved" ever follows them."""
