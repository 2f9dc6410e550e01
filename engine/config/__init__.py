"""The run's configuration: ``RunConfig`` and its sections, the operator's oversight
sections, reading a TOML file, a DeepSpeed JSON and ``--set`` overrides, the generated
reference, and the DeepSpeed config built from it. Torch-free."""
