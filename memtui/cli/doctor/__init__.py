"""``memtui doctor`` and ``memtui prepare``: the environment doctor's command line and report."""
