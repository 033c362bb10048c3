"""KV-cache and logits helpers across transformers versions (shared by the LM judges, LM
attribution and KV-cache eviction)."""

from __future__ import annotations

import inspect
from salience.extras import torch

__all__ = ["cache_argument", "returned_cache", "cache_prefix", "padded_rows", "eager_attention"]


def cache_argument(model) -> str:
    """The name a model's forward gives its cache: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(output):
    """The key/value cache a forward pass returned: ``cache`` in recent transformers (where
    ``past_key_values`` is deprecated), ``past_key_values`` before."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def cache_prefix(cache, length: int):
    """A new cache holding ``cache``'s first ``length`` positions, ``cache`` itself unchanged
    (its tensors are shared, not copied: a growing layer appends by concatenation, into new
    tensors); None where a layer is not one that simply grows (a sliding window's, a
    quantised or static one), whose positions a cut cannot recover."""
    import copy

    layers = getattr(cache, "layers", None)
    if not layers or any(getattr(layer, "is_sliding", True) or type(layer).__name__ != "DynamicLayer"
                         or layer.keys is None or layer.keys.shape[-2] < length for layer in layers):
        return None
    prefix = copy.copy(cache)
    prefix.layers = []
    for layer in layers:
        cut = copy.copy(layer)
        cut.keys, cut.values = layer.keys[:, :, :length], layer.values[:, :, :length]
        prefix.layers.append(cut)
    return prefix


def padded_rows(rows: list[list[int]], pad_id: int, *, left: bool = False):
    """``(ids, mask)`` of token rows padded to one width, on the right, or on the ``left`` so
    that every row ends at the last column (where a batch's next tokens are read)."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        columns = slice(width - len(r), width) if left else slice(0, len(r))
        ids[i, columns] = torch.tensor(r, dtype=torch.long)
        mask[i, columns] = 1
    return ids, mask


class eager_attention:
    """Attention weights are returned by the eager implementation only: switch to it for a
    call and back (transformers' ``set_attn_implementation``; older versions: the config)."""

    def __init__(self, model):
        self.model = model

    def __enter__(self):
        self.before = getattr(getattr(self.model, "config", None), "_attn_implementation", None)
        if self.before != "eager":
            self._set("eager")

    def __exit__(self, *exc):
        if self.before not in (None, "eager"):
            self._set(self.before)
        return False

    def _set(self, implementation: str) -> None:
        if hasattr(self.model, "set_attn_implementation"):
            self.model.set_attn_implementation(implementation)
        elif hasattr(self.model, "config"):
            self.model.config._attn_implementation = implementation
