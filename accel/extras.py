"""The optional packages: which of pyproject.toml's extras installs each, and the one wording of the error when a
command or recipe needs one that is not installed (the quickstart needs none, so setup installs only what is asked).
"""

from __future__ import annotations

import importlib
import importlib.util
import re
from types import ModuleType

from .errors import AccelError

# top-level module -> the extra that installs it (tests/test_extras.py checks them against pyproject.toml)
EXTRA_OF = {
    "albumentations": "data",
    "sklearn": "data",
    "skimage": "data",
    "nvidia": "dali",
    "onnx": "export",
    "onnxruntime": "export",
    "onnxscript": "export",
    "transformers": "hf",
    "accelerate": "hf",
    "lightning": "lightning",
    "pytorch_lightning": "lightning",
    "jsonargparse": "lightning",
    "timm": "timm",
    "datasets": "peers",
    "evaluate": "peers",
    "wandb": "trackers",
    "mlflow": "trackers",
    "torchao": "float8",
    "liger_kernel": "liger",
    "torch_xla": "xla",
    "optuna": "tune",
    "optuna_dashboard": "tune",
}


def missing_message(what: str, module: str) -> str:
    """`what` needs `module`, and the pip command that installs it (its extra's, where one has it)."""
    top = module.split(".")[0]
    extra = EXTRA_OF.get(top)
    command = f"pip install 'accel[{extra}]'" if extra else f"pip install {top}"
    return f"{what} needs {module}, which is not installed: {command}"


def unavailable(what: str, *modules: str) -> str | None:
    """The message for the first of `modules` that is not installed here (looked up, not imported: some imports
    take seconds); None where all are."""
    absent = [name for name in modules if not installed(name)]
    return missing_message(what, absent[0]) if absent else None


def require(what: str, *modules: str) -> None:
    """An AccelError naming the first of `modules` that is not installed, with its pip command."""
    message = unavailable(what, *modules)
    if message:
        raise AccelError(message)


def import_or_explain(module: str, what: str) -> ModuleType:
    """`module`, imported; an AccelError with its pip command where it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as err:
        if (err.name or "").split(".")[0] != module.split(".")[0]:
            raise  # a module the package itself imports is missing: its own error says which
        raise AccelError(missing_message(what, err.name)) from None


def hint(output: str) -> str:
    """For a process's output that ends in a ModuleNotFoundError of an extra's package: the line that names it."""
    found = re.findall(r"No module named '([\w.]+)'", output)
    if not found or found[-1].split(".")[0] not in EXTRA_OF:
        return ""
    return "\n" + missing_message("the script", found[-1])


def installed(name: str) -> bool:
    """Whether `name` can be imported here, looked up without importing it."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a missing parent package (`nvidia` of nvidia.dali) raises
        return False
