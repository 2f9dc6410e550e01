"""Chaos in the trainer: the injections in force step by step and who performs each kind.
The memory path's own hooks (ballast, injected OOMs) live in ``engine.trainer.memory``."""
