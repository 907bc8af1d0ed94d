"""The instrument starts when the script has imported torch, not before: importing torch first would change a
script that sets `OMP_NUM_THREADS` or other variables torch reads at import; and it joins the Hugging Face Trainer
when the script imports it (accel/trial/instrument/hf_trainer.py), as it joins Lightning's
(accel/trial/instrument/lightning.py). Nothing here imports torch."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
import traceback
from collections.abc import Callable
from types import ModuleType

from ...engine import trial_variables  # torch-free
from .. import backups, preload
from . import guard  # torch-free

SITE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "site")


class _AfterImport:
    """A finder that lets the other finders find a watched module, and has the loader they found call
    `then(module)` once the module's own code has run. A watch ends only there: a look-up that imports nothing
    (`importlib.util.find_spec("torch")`, as `datasets` and `transformers` check that torch is there) finds a spec
    that is never executed, and the import that follows is watched as the first would have been."""

    def __init__(self, watched: dict[str, Callable[[ModuleType], None]]):
        self.watched = watched

    def find_spec(self, name, path=None, target=None):
        if name not in self.watched:
            return None
        spec = self._others(name, path, target)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            spec.loader = _ThenLoader(spec.loader, lambda module: self._loaded(name, module))
        return spec

    def _others(self, name, path, target):
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = None if finder is self or find is None else find(name, path, target)
            if spec is not None:
                return spec
        return None

    def _loaded(self, name: str, module: ModuleType) -> None:
        then = self.watched.pop(name, None)
        if not self.watched and self in sys.meta_path:
            sys.meta_path.remove(self)
        if then is not None:
            _safely(then, module)


class _ThenLoader:
    """A found module's own loader, whose `exec_module` then calls `then(module)`; the module is given its own
    loader back before its code runs, so nothing in it (or that reads `__loader__` later) sees this one."""

    def __init__(self, loader, then: Callable[[ModuleType], None]):
        self.loader, self.then = loader, then

    def __getattr__(self, name):
        return getattr(self.loader, name)

    def exec_module(self, module: ModuleType) -> None:
        if getattr(module, "__loader__", None) is self:
            module.__loader__ = self.loader
        spec = getattr(module, "__spec__", None)
        if spec is not None and spec.loader is self:
            spec.loader = self.loader
        self.loader.exec_module(module)
        self.then(module)


def _safely(then: Callable[[ModuleType], None], module: ModuleType) -> None:
    try:
        then(module)
    except Exception:  # noqa: BLE001 - the script runs on; the trial then says what the instrument could not do
        print("accel: the instrument could not start:\n" + traceback.format_exc(), file=sys.stderr)


def _torch(torch: ModuleType) -> None:
    """The recorder, and apart from it the guard's step hook: a recorder that fails to start leaves the guard."""
    preload.mark_torch()
    _safely(_recorder, torch)
    _safely(backups.see_torch_writes, torch)
    guard.hook_torch()


def _recorder(torch: ModuleType) -> None:
    from . import recorder

    recorder.install()


def _hf_trainer(module: ModuleType) -> None:
    from . import hf_trainer

    hf_trainer.attach(module)


def _reported(attach: str) -> Callable[[ModuleType], None]:
    def then(module: ModuleType) -> None:
        from . import reported

        getattr(reported, attach)(module)

    return then


def _lightning(attach: str) -> Callable[[ModuleType], None]:
    def then(module: ModuleType) -> None:
        from . import lightning

        getattr(lightning, attach)(module)

    return then


def start() -> None:
    """Start the recorder once torch is imported, and join the HF Trainer, Lightning's Trainer, LightningCLI,
    Fabric, TensorBoard's SummaryWriter, wandb and MLflow once the script imports them (now, where they already are)."""
    trial_variables.claim_root()
    guard.start()
    watched = {"torch": _torch, "transformers.trainer": _hf_trainer}
    for package in ("lightning.pytorch", "pytorch_lightning"):
        watched[f"{package}.trainer.trainer"] = _lightning("attach_trainer")
        watched[f"{package}.cli"] = _lightning("attach_cli")
    watched["lightning.fabric.fabric"] = _lightning("attach_fabric")
    watched["torch.utils.tensorboard.writer"] = _reported("attach_tensorboard")
    watched["wandb"] = _reported("attach_wandb")
    watched["mlflow"] = _reported("attach_mlflow")
    for name in list(watched):
        if name in sys.modules:
            _safely(watched.pop(name), sys.modules[name])
    if watched:
        sys.meta_path.insert(0, _AfterImport(watched))


def chain_next_sitecustomize(ours: str) -> None:
    """Run the sitecustomize that ours shadows (a distribution's or a virtualenv's), as Python would have."""
    later = [p for p in sys.path if os.path.abspath(p or ".") != ours]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", later)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
