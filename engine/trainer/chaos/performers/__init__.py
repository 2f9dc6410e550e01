"""The chaos kinds the trainer carries out, one or a few per module; each module defines
``TrainerPerformer`` subclasses (``engine.trainer.chaos.performer``)."""
