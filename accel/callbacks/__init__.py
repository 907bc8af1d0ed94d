"""Callbacks: checkpointing, the run directory's records, early stopping, TensorBoard, progress."""

from .base import BatchInfo, Callback
from .checkpointing import Checkpointer
from .early_stopping import EarlyStopping
from .progress import ProgressBar
from .run_dir_writer import RunDirWriter
from .tensorboard import TensorBoard

__all__ = ["BatchInfo", "Callback", "Checkpointer", "EarlyStopping", "ProgressBar", "RunDirWriter", "TensorBoard"]
