"""The supervisor's Unix socket: who may connect, the hello, each console's outbox and the
fan-out to them, the trainer's seat, and what misbehaving peers sent."""
