"""MinAtar's games: the batch family, the single Gymnasium env, options, the reference and
parity."""
