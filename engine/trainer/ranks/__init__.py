"""The trainer's ranks: the process group, the few collectives memtui needs, several ranks
behind rank 0's link, and dying with the parent."""
