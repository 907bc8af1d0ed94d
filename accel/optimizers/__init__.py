"""Optimizers and schedules by name, parameter groups, Muon."""
