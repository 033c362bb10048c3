"""KV-cache and logits helpers across transformers versions (shared by the LM judges, LM
attribution and KV-cache eviction)."""

from __future__ import annotations

import inspect

__all__ = ["cache_argument", "returned_cache"]


def cache_argument(model) -> str:
    """The name a model's forward gives its cache: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(output):
    """The key/value cache a forward pass returned: ``cache`` in recent transformers (where
    ``past_key_values`` is deprecated), ``past_key_values`` before."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values
