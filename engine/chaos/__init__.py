"""Chaos kinds as objects: each kind's contract (request model, words, recovery signal) in
``kinds/``, the table every side reads in ``table``, the run's schedule config in ``config``.
Torch-free: the console, the supervisor and the trainer all read it."""
