"""Looking at runs without changing them: ``ls``, ``status``, ``logs``, ``checkpoints``,
``export`` and ``oom``."""
