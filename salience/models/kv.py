"""KV-cache and logits helpers across transformers versions (shared by the LM judges, LM
attribution and KV-cache eviction)."""

from __future__ import annotations

import inspect

__all__ = ["cache_argument", "returned_cache", "padded_rows"]


def cache_argument(model) -> str:
    """The name a model's forward gives its cache: ``cache`` from transformers 5.24 on,
    ``past_key_values`` before."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def returned_cache(output):
    """The key/value cache a forward pass returned: ``cache`` in recent transformers (where
    ``past_key_values`` is deprecated), ``past_key_values`` before."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def padded_rows(torch, rows: list[list[int]], pad_id: int, *, left: bool = False):
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
