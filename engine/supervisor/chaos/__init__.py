"""Chaos in a live run, supervisor side: the desk that records and performs each kind, who
performs it, its schedule, and whether the run recovered."""
