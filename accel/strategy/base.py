"""The plain strategy, and the interface every strategy keeps: wrap the model, own backward and the step."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from .. import devices
from .precision import Precision
from .setup_phases import Phase

if TYPE_CHECKING:
    from .slots import Slots
    from .world import World


class Strategy:
    """One process, the model as it is. A strategy owns backward and the optimizer step and hands their numeric
    part (autocast, loss scaling, unscaling before clipping) to its `precision`.

    `follows_device`: the device implies this strategy (plain, xla) rather than the recipe choosing it, so a
    speed-up that conflicts with it is skipped like one the device cannot run, not refused (accel.speedups).
    """

    name = "plain"
    phase = Phase.WRAP
    follows_device = True

    def __init__(self) -> None:
        self.precision = Precision()

    def use(self, precision: Precision, device: torch.device) -> None:
        self.precision = precision
        precision.setup(device)

    def prepare(self, model: nn.Module) -> nn.Module:
        """The model before the optimizer is built (FSDP shards it here: sharding replaces the parameters)."""
        return model

    def loaders(self, train: Any, val: Any) -> tuple[Any, Any]:
        """The loaders the trainer iterates (XLA feeds them through its own)."""
        return train, val

    def setup(self, engine: Slots) -> None:
        """Wrap the engine's `model` in the setup phase WRAP (DDP), through `engine.replace`."""

    def teardown(self) -> None:
        pass

    def no_sync(self, module: nn.Module) -> AbstractContextManager:
        """Around a micro-batch that does not step (forward and backward): skip reducing its gradients across
        processes."""
        return nullcontext()

    def eval_forwards_short(self, batches: int, world: World, device: torch.device) -> int:
        """How many more evaluation forwards than its `batches` this rank must run, results unused, to keep in
        step with the others."""
        return 0

    def full_state_dicts(self, module: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
        """The model's and optimizer's whole state on the CPU (collective where the model is sharded)."""
        return devices.to_cpu(module.state_dict()), devices.to_cpu(optimizer.state_dict())

    def load_full_state_dicts(
        self, module: nn.Module, optimizer: torch.optim.Optimizer, model_state: dict, optim_state: dict
    ) -> None:
        module.load_state_dict(model_state)
        optimizer.load_state_dict(optim_state)

    def backward(self, loss: torch.Tensor) -> None:
        self.precision.backward(loss)

    def optimizer_step(self, optimizer: torch.optim.Optimizer, clip: Callable[[], None]) -> bool:
        """Clip and step; False when the precision skipped the step (inf gradients in fp16)."""
        return self.precision.optimizer_step(optimizer, clip, self.step)

    def step(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.step()

    def loop_backward(self) -> Callable[[torch.Tensor], None]:
        """A hand-written loop's backward: the tensor's own where neither this strategy nor its precision adds to
        it (fp32, bf16: two frames fewer a micro-batch), else theirs."""
        if type(self).backward is Strategy.backward and type(self.precision).backward is Precision.backward:
            return torch.Tensor.backward
        return self.backward

    @property
    def syncs(self) -> bool:
        """Whether gradients are reduced across processes in backward, so a micro-batch that does not step has a
        `no_sync` to run in."""
        return type(self).no_sync is not Strategy.no_sync

    def loop_step(self, optimizer: torch.optim.Optimizer) -> Callable[[], object]:
        """A hand-written loop's `optimizer.step()` (the loop clips itself): the optimizer's own step where
        neither this strategy nor its precision adds to it (fp32, bf16: two frames fewer a step), else theirs."""
        if type(self).step is Strategy.step and type(self.precision).optimizer_step is Precision.optimizer_step:
            return optimizer.step
        return lambda: self.optimizer_step(optimizer, _no_clip)

    def end_epoch(self) -> None:
        """At each epoch's end, before `metrics()` is read: say what the epoch showed."""

    def metrics(self) -> dict[str, Any]:
        return {}


def _no_clip() -> None:
    """The loop clips itself (eng.clip_gradients), before optimizer.step()."""
