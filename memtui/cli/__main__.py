"""``python -m memtui.cli``: the same as the ``memtui`` command."""

from __future__ import annotations

import sys

from memtui.cli.main import main

sys.exit(main())
