"""What a step costs and why: anatomy, FLOPs and peaks, machine load, the speed lint and its traps, doctor."""
