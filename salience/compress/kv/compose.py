"""KVCompose (Akulov et al., 2025; kvpress's KVComposePress): after the prefill the context is
read a second time on top of its own cache; each query head's attention on the context tokens
is aggregated over the second reading's queries (``agg_task``: the largest or the mean), then
over the heads of a key/value group (``agg_group``), optionally times the value's norm
(``add_v_norm``) and plus the layer's mean over its key/value heads
(``add_mean_across_heads``). The budget is shared among layers by *composite* scores: each
head's scores sorted from high to low and aggregated over the layer's heads (``agg_head``)
position by position, the first layer's composite raised to the largest any layer has; the
best of all layers' composite entries decide how many tokens each layer keeps (at least
``keep_token_lower_bound``, and 1). ``structured=True``: every head of a layer keeps that many
of its own best tokens, so the cache stays one rectangle per layer (what a standard inference
engine can hold); ``structured=False``: the same allotment per head, from each head's own
sorted scores. Query-agnostic. The second reading costs one more prefill.
"""

from __future__ import annotations

import numpy as np

from salience.compress.kv.policy import KVNeeds, KVPolicy, _window_attention
from salience.core.base import register_method
from salience.core.params import Interval, Options
from salience.extras import torch

__all__ = ["KVCompose"]

_AGGREGATIONS = ("max", "mean")


def _aggregate(scores, how: str, dim):
    return scores.amax(dim=dim) if how == "max" else scores.mean(dim=dim)


@register_method("kv", "kvcompose", "KV cache: the context read again on its cache, each head's attention on it "
                                    "aggregated; per-layer budgets from composite sorted scores, every head of a layer "
                                    "keeping the same count (KVCompose, Akulov et al., 2025; kvpress's "
                                    "KVComposePress)")
class KVCompose(KVPolicy):
    """See the module docstring. ``score(keys, values, queries=...)`` scores one layer: ``keys``
    the context then the second reading's own keys (the last as many as ``queries``)."""

    needs = KVNeeds(queries="all", when="after_prefill")
    _parameter_constraints = {"structured": [bool], "agg_task": [Options(_AGGREGATIONS)],
                              "agg_group": [Options(_AGGREGATIONS)], "agg_head": [Options(_AGGREGATIONS)],
                              "add_v_norm": [bool], "add_mean_across_heads": [bool],
                              "keep_token_lower_bound": [Interval("int", 0)]}

    def __init__(self, *, structured: bool = True, agg_task: str = "max", agg_group: str = "mean",
                 agg_head: str = "mean", add_v_norm: bool = False, add_mean_across_heads: bool = True,
                 keep_token_lower_bound: int = 0):
        self.structured, self.agg_task, self.agg_group, self.agg_head = structured, agg_task, agg_group, agg_head
        self.add_v_norm, self.add_mean_across_heads = add_v_norm, add_mean_across_heads
        self.keep_token_lower_bound = keep_token_lower_bound
        super().__init__()

    def _task_scores(self, keys, queries, scaling):
        """(b, kv_heads, context) from the second reading's queries (b, heads, q, d) over
        ``keys`` (the context, then the reading's own q keys)."""
        context = keys.shape[-2] - queries.shape[-2]
        attention = _window_attention(queries, keys, scaling)[..., :context]  # (b, heads, q, context)
        per_head = _aggregate(attention, self.agg_task, dim=2)
        b, heads, _ = per_head.shape
        n_kv = keys.shape[1]
        return _aggregate(per_head.view(b, n_kv, heads // n_kv, context), self.agg_group, dim=2)

    def _scores(self, keys, values, queries, scaling, n):
        context = n - queries.shape[-2]
        scores = self._task_scores(keys, queries, scaling)
        scores = self._enhanced(scores, values[:, :, :context])
        own = torch.full(scores.shape[:2] + (n - context,), float(scores.max()) + 1 if context else 1.0,
                         dtype=scores.dtype)
        return torch.cat([scores, own], dim=-1)

    def _enhanced(self, scores, values):
        if self.add_v_norm:
            scores = scores * values.to(scores.dtype).norm(dim=-1)
        if self.add_mean_across_heads:
            scores = scores + scores.mean(dim=1, keepdim=True)
        return scores

    def layer_counts(self, scores, keep: int):
        """Tokens kept per layer and head (layers, kv_heads) from every layer's scores
        (layers, kv_heads, n) when the uniform budget keeps ``keep`` per head: the best
        ``layers x keep`` composite entries (structured: per layer, the same in its heads)."""
        layers, n_kv, n = scores.shape
        ordered = scores.sort(dim=-1, descending=True).values
        bound = self.keep_token_lower_bound
        if self.structured:
            composite = _aggregate(ordered, self.agg_head, dim=1)  # (layers, n)
            composite[:, :bound] += 1e9
            composite[0] = composite.max(dim=0).values  # the first layer the largest
            chosen = composite.reshape(-1).topk(layers * keep).indices // n
            counts = torch.bincount(chosen, minlength=layers).clamp(min=max(1, bound))
            return counts[:, None].expand(layers, n_kv).numpy()
        ordered[..., :bound] += 1e9
        chosen = ordered.reshape(-1).topk(layers * n_kv * keep).indices // n
        return torch.bincount(chosen, minlength=layers * n_kv).reshape(layers, n_kv).numpy()

    def evicted_layers(self, model, modules, cache, ids, keep: int, keep_last: int = 0) -> list:
        """After the prefill of ``ids`` (1, n) into ``cache``: the second reading, then which
        tokens each layer evicts, boolean (1, kv_heads, n) per layer (the last ``keep_last``
        never evicted)."""
        from salience.compress.kv.policy import _torch
        from salience.compress.kv.reconstruction import refuse_sliding_windows, replay_on_cache

        torch = _torch()
        refuse_sliding_windows(self, modules)
        n = ids.shape[1]
        scores = [None] * len(modules)

        def score_layer(module, layer, queries, hidden):
            task = self._task_scores(layer.keys, queries, module.scaling)
            scores[module.layer_idx] = self._enhanced(task, layer.values[:, :, :n])[0]

        replay_on_cache(model, modules, cache, ids, n, score_layer)
        every = torch.stack(scores)  # (layers, kv_heads, n)
        if keep_last:
            every[..., n - keep_last:] = float("inf")
        counts = self.layer_counts(every, keep)
        evicted = []
        for layer_scores, layer_counts in zip(every, counts):
            out = np.ones(layer_scores.shape, dtype=bool)
            for head, count in enumerate(layer_counts):
                out[head, torch.argsort(layer_scores[head], descending=True, stable=True)[: int(count)].numpy()] = False
            evicted.append(out[None])
        return evicted
