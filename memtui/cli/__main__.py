"""``python -m memtui.cli``: the same as the ``memtui`` command."""

from __future__ import annotations

import sys

from memtui.cli.main import main

if __name__ == "__main__":  # importing it (an import check) runs nothing
    sys.exit(main())
