"""Directives from the shell: ``directives``, ``approve``, ``reject``, ``clamp``, ``propose``."""
