"""Datasets, samplers, loaders and on-device batch transforms."""

from .splits import Splits

__all__ = ["Splits"]
