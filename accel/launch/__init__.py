"""Starting processes and machines: torchrun's command and its relay, clusters (SLURM, Kubernetes)."""
