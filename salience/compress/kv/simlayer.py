"""A KV-cache policy of the ``kv`` family that decides per layer (kvpress's SimLayerKVPress):

* ``simlayerkv``: a layer is "lazy" when its last ``n_last`` queries pay more than
  ``lazy_threshold`` of their attention to the ``n_sink`` sinks and the recent tokens; a lazy
  layer keeps only those (the budget), the others keep everything (SimLayerKV, Zhang et al.,
  2024; kvpress's SimLayerKVPress);
"""

from __future__ import annotations

import numpy as np

from salience.compress.kv.policy import KVNeeds, KVPolicy, _window_attention
from salience.compress.kv.position import StreamingLLM
from salience.core.base import register_method
from salience.core.params import Interval
from salience.extras import torch

__all__ = ["SimLayerKV"]


@register_method("kv", "simlayerkv", "KV cache: lazy layers (the last query's attention on the sinks and recent "
                                     "tokens above a threshold) keep only those, the others everything (SimLayerKV, "
                                     "Zhang et al., 2024; kvpress's SimLayerKVPress)")
class SimLayerKV(KVPolicy):
    """Per layer: the attention of the prompt's last ``n_last`` queries over the keys before
    them, averaged over heads and queries; the layer is lazy when the share on the ``n_sink``
    first tokens and the recent ones exceeds ``lazy_threshold``. A lazy layer keeps the sinks
    and its most recent tokens, the budget in all; any other layer keeps every token, so the
    cache holds more than the budget (layers of different lengths, each attended with a mask of
    its own). As kvpress, the recent span tested is the budget's recent tokens plus ``n_last``,
    counted before the last queries, and a prompt no longer than the sinks, that span and
    ``n_last`` is kept whole. The default threshold, 0.9, is SimLayerKV's for Llama-3 (kvpress's
    1.0 marks no layer lazy)."""

    needs = KVNeeds(queries="window", reads=("keep",))
    _parameter_constraints = {"lazy_threshold": [Interval("real", 0, 1)], "n_last": [Interval("int", 1)],
                              "n_sink": [Interval("int", 0)]}

    def __init__(self, *, lazy_threshold: float = 0.9, n_last: int = 1, n_sink: int = 4):
        self.lazy_threshold, self.n_last, self.n_sink = lazy_threshold, n_last, n_sink
        super().__init__()

    def query_count(self, n_tokens: int, question: int = 0) -> int:
        return min(self.n_last, n_tokens)

    def protected(self) -> tuple[int, str]:
        return self.n_sink + 1, f"the {self.n_sink} sinks and at least one recent token"

    def lazy(self, keys, queries, scaling, keep: int):
        """Whether the layer is lazy for each prompt of the batch (b,) when the budget keeps
        ``keep`` per head; None when the prompt is too short to tell (kept whole)."""
        n, w = keys.shape[-2], min(self.n_last, queries.shape[-2])
        recent = keep - self.n_sink + w
        if n <= self.n_sink + recent + w or recent < 1:
            return None
        attention = _window_attention(queries[:, :, -w:], keys, scaling)[..., : n - w].mean(dim=(1, 2))
        share = attention[:, : self.n_sink].sum(dim=-1) + attention[:, -recent:].sum(dim=-1)
        return share > self.lazy_threshold

    def _scores(self, keys, values, queries, scaling, n, keep):
        # a lazy layer: the sinks above all, then the most recent tokens (StreamingLLM's order)
        scores = StreamingLLM(n_sink=self.n_sink)._scores(keys, values, queries, scaling, n)
        lazy = self.lazy(keys, queries, scaling, keep)
        busy = torch.ones(keys.shape[0], dtype=torch.bool) if lazy is None else ~lazy
        scores[busy] = float("inf")  # a layer that is not lazy keeps every token
        return scores

    def evicted(self, scores, count: int) -> np.ndarray:
        out = super().evicted(scores, count)
        out[np.isposinf(scores).all(axis=-1)] = False
        return out
