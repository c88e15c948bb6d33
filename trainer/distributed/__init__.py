"""Ranks: the process group, collectives on one machine, torchrun and the hand-off to it."""
