"""``memtui plan``: the capacity plan, the hardware it is for, and the plan against a run's reality."""
