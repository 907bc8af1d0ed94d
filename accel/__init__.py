"""accel: composable PyTorch training speed-ups, driven by YAML recipes, with A/B speed reports."""
from . import speedups
from .errors import AccelError
from .recipe import Recipe, load_recipe
from .run import build_trainer, run_recipe
from .trainer import Trainer

__all__ = ["AccelError", "Recipe", "Trainer", "build_trainer", "load_recipe", "run_recipe", "speedups"]
__version__ = "0.1.0"
