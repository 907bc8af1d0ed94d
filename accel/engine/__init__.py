"""The step machinery the Trainer and a user's own loop share, and the own loop's API (accel.Engine)."""
