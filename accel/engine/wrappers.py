"""What `accel.Engine.setup` hands back to a hand-written loop: the user's model and optimizer, still theirs.

The model is the user's own module object seen through a subclass of its class that shares its attributes
(`__dict__`): `model.config`, `model.generate(...)`, `isinstance(model, GPT)` and `model.state_dict()` (the
user's keys, no `_orig_mod.` or `module.` prefixes) are the module's, and only a call, `model(x)`, goes through
what the speed-ups and the strategy made of it (compiled, DDP-wrapped). Methods run on the module itself, eagerly,
as they would without accel (a `generate` loop of changing lengths must not recompile a compiled forward).

The optimizer is a stand-in of the optimizer's class whose `param_groups`, `state` and `defaults` are the real
ones (a loop that sets `param_group["lr"]` itself keeps working; schedulers accept it), and whose `step()` goes
through the engine: the strategy and precision (GradScaler step/update, XLA's optimizer step).
"""

from __future__ import annotations

import copy
import copyreg
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from ..errors import AccelError

if TYPE_CHECKING:
    from .core import Core


def _subclass(base: type, cls: type, core: Core, through: Callable) -> type:
    """`cls` with `base` mixed in, for one engine: its core and the engine's function a call goes `through` are
    class attributes, so the shared `__dict__` (the user's module's own) never holds them."""
    names = {"__module__": cls.__module__, "__qualname__": cls.__qualname__}
    names |= {"_accel_core": core, "_accel_through": staticmethod(through)}
    if base is EngineModule:
        # `model(x)` is the engine's forward itself, one frame and no nn.Module hooks (they are the module's own,
        # shared, and run once, in the forward's call of the module)
        names["__call__"] = names["_accel_through"]
    return type(cls.__name__, (base, cls), names)


class EngineModule(nn.Module):
    """Mixed into the user's module class; see the module docstring."""

    _accel_core: Core
    _accel_through: Callable[..., Any]  # the engine's forward, which is also each subclass's `__call__`

    def train(self, mode: bool = True) -> nn.Module:
        super().train(mode)
        model = self._accel_core.model
        if isinstance(model, nn.Module) and model.training != mode:
            model.train(mode)  # DDP and compiled wrappers keep a `training` flag of their own
        return self

    def __deepcopy__(self, memo: dict) -> nn.Module:
        # a copy (an EMA of the weights, taken by the loop) is a plain module of the user's class: calling it must
        # run its own weights, not the engine's model
        plain = object.__new__(type(self).__mro__[2])
        memo[id(self)] = plain
        plain.__dict__.update(copy.deepcopy(self.__dict__, memo))
        return plain

    def __reduce_ex__(self, protocol: Any) -> Any:
        # torch.save(model) pickles the user's module, which loads without accel (copyreg rebuilds the class)
        return copyreg._reconstructor, (type(self).__mro__[2], object, None), self.__dict__


def wrap_module(module: nn.Module, core: Core, forward: Callable[..., Any]) -> nn.Module:
    """The user's module, answering as itself, with calls through the engine's `forward`."""
    wrapped = object.__new__(_subclass(EngineModule, type(module), core, forward))
    object.__setattr__(wrapped, "__dict__", module.__dict__)
    return wrapped


class EngineOptimizer(torch.optim.Optimizer):
    """Mixed into the user's optimizer class; see the module docstring. `__init__` is never called: every
    attribute not set on the stand-in is read from the real optimizer."""

    @property
    def _step_supports_amp_scaling(self) -> bool:
        # with accel's fp16 on, a loop's own GradScaler then marks the stand-in before stepping it (refused);
        # without, the loop's scaler unscales and steps it as it would the real optimizer
        return self._accel_core.strategy.precision.name == "fp16"

    _accel_core: Core
    _accel_through: Callable[[], None]  # the engine's optimizer step

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        object.__setattr__(self, "_accel_real", optimizer)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_accel_real"], name)

    # the real optimizer's state, read and written there
    param_groups = property(lambda self: self._accel_real.param_groups)
    state = property(lambda self: self._accel_real.state)
    defaults = property(lambda self: self._accel_real.defaults)

    def step(self, closure: Any = None) -> Any:
        if "found_inf" in self.__dict__:
            given = self._accel_core.precision_speedup()
            raise AccelError(
                "the loop steps the optimizer through a GradScaler of its own, while accel scales the loss (fp16): "
                "remove the loop's GradScaler (eng.backward scales, optimizer.step() unscales and updates)"
                + (f", or drop `speedups.{given}`" if given else "")
            )
        if closure is not None:
            raise AccelError("optimizer.step(closure) is not supported through the engine: call it without one")
        self._accel_through()

    def zero_grad(self, set_to_none: bool = True) -> None:
        self._accel_real.zero_grad(set_to_none=set_to_none)

    def state_dict(self) -> dict[str, Any]:
        return self._accel_real.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._accel_real.load_state_dict(state_dict)

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self._accel_real.add_param_group(param_group)

    def __repr__(self) -> str:
        return repr(self._accel_real)


def wrap_optimizer(optimizer: torch.optim.Optimizer, core: Core, step: Callable[[], None]) -> torch.optim.Optimizer:
    """A stand-in of the optimizer's class, stepped through the engine's `step`: `isinstance` and schedulers see an
    optimizer of that class."""
    wrapped = object.__new__(_subclass(EngineOptimizer, type(optimizer), core, step))
    EngineOptimizer.__init__(wrapped, optimizer)
    return wrapped


def unwrap(obj: Any) -> Any:
    """The user's object behind a stand-in (the optimizer), or the object itself."""
    return obj.__dict__.get("_accel_real", obj) if isinstance(obj, EngineOptimizer) else obj
