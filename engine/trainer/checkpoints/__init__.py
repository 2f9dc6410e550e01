"""The trainer's checkpoints: DeepSpeed's saves made durable, when to save, the data
cursor a resume goes on from, and resuming at another world size."""
