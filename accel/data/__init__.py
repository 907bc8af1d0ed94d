"""Datasets, samplers, loaders and on-device batch transforms."""
