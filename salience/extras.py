"""Optional imports: one guard for every extra, its install hint generated from one table (a
leaf module, as :mod:`salience.exceptions`: every layer may import it)."""

from __future__ import annotations

import importlib
from types import ModuleType

from salience.exceptions import MissingDependencyError

__all__ = ["EXTRAS", "install_hint", "require", "require_torch"]

#: extra -> what pip installs for it (pyproject.toml's optional dependencies say the same)
EXTRAS = {
    "torch": "pip install 'salience[torch]' (the CPU build: torch==2.13.0)",
    "lm": "pip install 'salience[lm]' (torch, transformers, gguf and accelerate; the CPU torch==2.13.0)",
    "embed": "pip install 'salience[embed]'",
    "onnx": "pip install 'salience[onnx]'",
    "server": "pip install 'salience[server]'",
    "ray": "pip install 'salience[ray]'",
    "parquet": "pip install 'salience[parquet]'",
    "plot": "pip install 'salience[plot]'",
    "ann": "pip install 'salience[ann]'",
    "pos": "pip install 'salience[pos]'",
    "text": "pip install 'salience[text]'",
}


def install_hint(extra: str) -> str:
    """The command that installs ``extra``."""
    return EXTRAS[extra]


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``module`` imported, or a :class:`~salience.exceptions.MissingDependencyError` saying that
    ``purpose`` needs it and how to install ``extra``."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(f"{purpose} needs {module.split('.')[0]}: {install_hint(extra)}") from None


def require_torch(purpose: str) -> ModuleType:
    """The torch module, or an error naming the extra to install for ``purpose``."""
    return require("torch", "torch", purpose)
