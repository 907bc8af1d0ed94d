"""Callbacks: checkpointing, early stopping, TensorBoard, progress."""

from .base import BatchInfo, Callback
from .checkpointing import Checkpointer
from .early_stopping import EarlyStopping
from .progress import ProgressBar
from .tensorboard import TensorBoard

__all__ = ["BatchInfo", "Callback", "Checkpointer", "EarlyStopping", "ProgressBar", "TensorBoard"]
