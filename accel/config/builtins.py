"""Imports every module that registers builders, so the registries are full before a recipe is read."""

from .. import models, speedups, tasks  # noqa: F401
from ..data import datasets  # noqa: F401
from ..optimizers import builders  # noqa: F401
from ..tasks import losses  # noqa: F401
