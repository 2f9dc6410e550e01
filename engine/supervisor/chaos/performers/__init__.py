"""The chaos kinds the supervisor carries out itself, one or a few per module; each module
defines ``SupervisorPerformer`` subclasses (``engine.supervisor.chaos.performer``)."""
