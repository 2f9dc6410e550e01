"""Starting, resuming, pausing and stopping runs, and ``memtui endure``: the commands that
change a run's life."""
