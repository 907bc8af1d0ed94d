"""The recipe's loop: from a recipe to a finished run directory, the Trainer and the parts of its loop."""
