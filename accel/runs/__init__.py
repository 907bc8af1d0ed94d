"""What a run leaves on disk and how it survives: the run directory, its lock, checkpoints, signals, RNG."""
