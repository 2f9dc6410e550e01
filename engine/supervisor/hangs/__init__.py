"""A hung trainer: when it counts as hung, its stacks collected, its processes killed and
the run restarted."""
