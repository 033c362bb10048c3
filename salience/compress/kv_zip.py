"""KVzip (Kim et al., 2025; kvpress's KVzipPress): which cached tokens the model needs to
*repeat its context*. After the prefill, the model is asked to reconstruct the context ("Repeat
the previous context exactly." then the context itself) on top of the full cache; a token's
score is the largest attention any reconstruction query of a key/value head's group pays it,
the softmax taken over the attention sinks, the chunk being repeated and the reconstruction's
own tokens. Contexts longer than ``chunk_size`` are repeated chunk by chunk, each prompted
with the previous chunk's last 8 tokens. The cache then keeps the best tokens across every
layer and head together (``layerwise=False``, the default: layers and heads keep different
numbers, the total as the uniform budget's) or across the heads of each layer; the first
``n_sink`` tokens are always kept. Query-agnostic: the scores do not depend on a question.

The reconstruction costs two to three prefills. Its prompt is tokenized by ``tokenizer``;
``suffix`` separates the instruction from the repeated text ("\\n" for raw text, as kvpress
does for a model without a chat template; a chat model's assistant turn otherwise).
"""

from __future__ import annotations

import numpy as np

from salience.compress.kv_policies import KVPolicy
from salience.core.base import register_method
from salience.core.masks import lowest_k_mask
from salience.core.params import Interval
from salience.exceptions import InvalidParameterError

__all__ = ["KVzip", "reconstruction_scores"]

#: the reconstruction's prompts (KVzip's): the first chunk, and the later ones (followed by the
#: previous chunk's last tokens)
FIRST_PROMPT = "\n\nRepeat the previous context exactly."
LATER_PROMPT = "\n\nRepeat the part of the previous context exactly, starting with"
OVERLAP = 8


def reconstruction_scores(torch, keys, queries, scaling: float, start: int, end: int, sink: int):
    """Scores (b, kv_heads, end - start) of the cached tokens ``start .. end`` from the
    reconstruction's ``q`` queries (b, heads, q, d), rotary positions applied: ``keys`` (b,
    kv_heads, N, d) hold the context then the reconstruction's own q keys (its last). Each
    query's softmax runs over the first ``sink`` keys, the chunk and the reconstruction's own
    keys (causally); a token scores the largest weight any query of its group gives it."""
    q, n_total = queries.shape[-2], keys.shape[-2]
    b, n_kv, _, d = keys.shape
    groups = queries.shape[1] // n_kv
    kept = torch.cat([keys[:, :, :sink], keys[:, :, start:end], keys[:, :, n_total - q:]], dim=2)
    dtype = torch.promote_types(queries.dtype, torch.float32)
    grouped = queries.to(dtype).reshape(b, n_kv, groups, q, d)
    logits = grouped @ kept.to(dtype)[:, :, None].transpose(-1, -2) * scaling  # (b, kv, g, q, sink + chunk + q)
    future = torch.triu(torch.ones(q, q, dtype=torch.bool), diagonal=1)
    logits[..., -q:] = logits[..., -q:].masked_fill(future, float("-inf"))
    weights = torch.softmax(logits, dim=-1)[..., sink : sink + end - start]
    return weights.amax(dim=(2, 3))


@register_method("kv", "kvzip", "KV cache: attention each token receives while the model repeats its context "
                                "(KVzip, Kim et al., 2025); budgets shared across layers and heads")
class KVzip(KVPolicy):
    """See the module docstring. ``score(keys, values, queries=...)`` scores one layer for a
    single chunk: ``keys`` the context then the reconstruction's own keys (the last as many as
    ``queries``), which are never cache tokens and score above all."""

    reconstructs = True
    queries = "all"
    _parameter_constraints = {"n_sink": [Interval("int", 0)], "chunk_size": [Interval("int", OVERLAP + 1)]}

    def __init__(self, *, tokenizer=None, n_sink: int = 4, chunk_size: int = 2048, layerwise: bool = False,
                 suffix: str = "\n"):
        self.tokenizer, self.n_sink, self.chunk_size = tokenizer, n_sink, chunk_size
        self.layerwise, self.suffix = layerwise, suffix
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return max(1, self.n_sink), f"the {self.n_sink} sinks"

    def _scores(self, torch, keys, values, queries, scaling, n):
        context = n - queries.shape[-2]
        scores = reconstruction_scores(torch, keys, queries, scaling, 0, context, 0)
        own = torch.full(scores.shape[:2] + (n - context,), float(scores.max()) + 1 if context else 1.0,
                         dtype=scores.dtype)
        return torch.cat([scores, own], dim=-1)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def evicted_layers(self, model, modules, cache, ids, keep: int, keep_last: int = 0) -> list:
        """After the prefill of ``ids`` (1, n) into ``cache``: the reconstruction passes, then
        which tokens each layer evicts, boolean (1, kv_heads, n) per layer, ``keep`` per head
        on average (the last ``keep_last`` never evicted)."""
        from salience.compress.kv import _queries
        from salience.compress.kv_policies import _torch
        from salience.models.kv import cache_argument

        torch = _torch()
        if self.tokenizer is None:
            raise InvalidParameterError("policy 'kvzip' needs tokenizer= (it prompts the model to repeat its context).")
        if any(getattr(module, "is_sliding", False) for module in modules):
            raise InvalidParameterError("policy 'kvzip' does not apply to sliding-window attention layers (they evict "
                                        "by themselves), as kvpress's KVzipPress refuses Gemma-3.")
        n = ids.shape[1]
        n_kv = cache.layers[0].keys.shape[1]
        scores = np.zeros((len(modules), 1, n_kv, n))
        chunk = {}

        def score_layer(module, args, kwargs, output):
            layer = cache.layers[module.layer_idx]
            hidden = kwargs["hidden_states"]
            with torch.no_grad():
                queries = _queries(torch, module, hidden, kwargs["position_embeddings"], hidden.shape[1])
                part = reconstruction_scores(torch, layer.keys, queries, module.scaling, chunk["start"], chunk["end"],
                                             min(self.n_sink, chunk["start"]))
            scores[module.layer_idx][..., chunk["start"] : chunk["end"]] = part.double().numpy()
            layer.keys, layer.values = layer.keys[:, :, :n], layer.values[:, :, :n]  # the context only
            return output

        handles = [module.register_forward_hook(score_layer, with_kwargs=True) for module in modules]
        suffix = self._encode(self.suffix)
        ids = ids.reshape(-1).tolist()
        try:
            for start in range(0, n, self.chunk_size):
                end = min(start + self.chunk_size, n)
                prompt = (self._encode(FIRST_PROMPT) if start == 0
                          else self._encode(LATER_PROMPT) + ids[max(0, start - OVERLAP) : start])
                repeat = torch.tensor([prompt + suffix + ids[start:end]])
                chunk.update(start=start, end=end)
                with torch.no_grad():
                    model(input_ids=repeat, **{cache_argument(model): cache}, use_cache=True,
                          position_ids=torch.arange(n, n + repeat.shape[1])[None])
        finally:
            for handle in handles:
                handle.remove()
        scores[..., : self.n_sink] = scores.max() + 1  # the sinks stay
        if keep_last:
            scores[..., n - keep_last :] = np.inf
        count = n - keep  # evicted per head on average
        if self.layerwise:
            return [lowest_k_mask(s.reshape(1, -1), n_kv * count).reshape(1, n_kv, n) for s in scores]
        flat = lowest_k_mask(scores.reshape(1, -1), len(modules) * n_kv * count)
        return list(flat.reshape(len(modules), 1, n_kv, n))
