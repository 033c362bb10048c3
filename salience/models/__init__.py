"""The neural runtime every domain shares: the one transformer encoder (torch, ONNX or int8;
:mod:`salience.models.encoders`), the causal-LM loader and its cache of dequantized GGUF
models, and the KV-cache and logits helpers (the optional-import guards they use are
:mod:`salience.extras`).

Nothing here imports a domain; the domains (search, explain, compress, ...) import it. Every
heavy library is imported inside the function that needs it, so ``import salience.models`` is
as light as ``import salience``.
"""

from __future__ import annotations

import importlib

__all__ = ["load_causal_lm", "cache_entries", "clear_cache", "cache_root", "cache_argument", "returned_cache",
           "TransformerEncoder", "get_encoder", "load_transformer", "require", "require_torch", "install_hint"]

_HOMES = {"load_causal_lm": "lm", "cache_entries": "lm", "clear_cache": "lm", "cache_root": "lm",
          "cache_argument": "kv", "returned_cache": "kv", "TransformerEncoder": "encoders", "get_encoder": "encoders",
          "load_transformer": "encoders"}


def __getattr__(name: str):
    if name in ("require", "require_torch", "install_hint"):  # the optional-import guards (salience.extras)
        return getattr(importlib.import_module("salience.extras"), name)
    if name in _HOMES:
        return getattr(importlib.import_module(f"salience.models.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'salience.models' has no attribute {name!r}")
