"""Imports every module that registers builders, so the registries are full before a recipe is read."""

from . import losses, models, optim, speedups, tasks  # noqa: F401
from .data import datasets  # noqa: F401
