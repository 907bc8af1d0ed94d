"""The named phases a run's setup goes through, in order (speed-ups declare one; the strategy wraps in WRAP)."""

from __future__ import annotations

from enum import IntEnum


class Phase(IntEnum):
    """When a speed-up's setup runs. Phases run in this order, speed-ups within one by name; the strategy wraps
    the model (DDP) in WRAP, so what compiles the model sees the wrapped one. Teardown runs in reverse."""

    FLAGS = 1  # process-global settings (threads, cuDNN flags) that everything after runs under
    LAYOUT = 2  # the memory layout of the weights, before anything traces or wraps them
    KERNELS = 3  # which kernels run (attention, the optimizer's implementation)
    MODEL = 4  # modules rewritten in place (float8 layers, checkpointed blocks)
    PRECISION = 5  # the numeric format (amp), handed to the strategy as its Precision
    WEIGHTS = 6  # copies of the weights (EMA), taken of the model as it will train
    WRAP = 7  # the strategy: DistributedDataParallel wraps the model here
    COMPILE = 8  # turn the model into another program: last, so it captures what every other phase did
