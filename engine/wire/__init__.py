"""The wire between consoles, the supervisor and the trainer: the messages, their framing
(one JSON object a line, bounded) and JSON as the wire takes it. Torch-free."""
