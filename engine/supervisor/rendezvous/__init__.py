"""A run over several nodes: each attempt's rendezvous, said, watched and bounded."""
