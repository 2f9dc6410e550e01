"""Every chaos kind's contract, one or a few per module; ``engine.chaos.table`` imports
each module here and collects the ``ChaosKind`` subclasses it defines."""
