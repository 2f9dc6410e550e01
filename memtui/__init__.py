"""memtui: an operator console for long PyTorch/DeepSpeed training runs.

This package is the console and CLI; it never imports torch or deepspeed.
"""

from __future__ import annotations

__version__ = "0.1.0"
