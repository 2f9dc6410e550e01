"""The ``memtui`` command line: the parser and one module per command group, sharing one
``CliError`` and one resolver of which run a command means. Never imports torch.
"""
