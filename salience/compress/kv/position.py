"""KV-cache policies by position or by chance, the baselines of the ``kv`` family (higher =
kept; the base in :mod:`salience.compress.kv.policy`):

* ``streaming_llm``: the first ``n_sink`` tokens (attention sinks) and the most recent ones
  (Xiao et al., 2024);
* ``random``: uniform random scores, a baseline (kvpress's ``RandomPress``: with a ``seed``,
  every layer draws the same scores from a generator seeded afresh).
"""

from __future__ import annotations

from salience.core.base import register_method
from salience.core.params import Interval
from salience.extras import torch
from salience.compress.kv.policy import KVPolicy

__all__ = ["StreamingLLM", "RandomKV"]


@register_method("kv", "streaming_llm", "KV cache: attention sinks + the most recent tokens (StreamingLLM, Xiao et al., "
                                        "2024)")
class StreamingLLM(KVPolicy):
    _parameter_constraints = {"n_sink": [Interval("int", 0)]}

    def __init__(self, *, n_sink: int = 4):
        self.n_sink = n_sink
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return self.n_sink + 1, f"the {self.n_sink} sinks and at least one recent token"

    def _scores(self, keys, values, queries, scaling, n):
        # sinks first, then the most recent tokens: score by position, sinks above all
        b, n_kv = keys.shape[:2]
        scores = torch.arange(n, dtype=torch.promote_types(keys.dtype, torch.float32)).expand(b, n_kv, n).clone()
        scores[..., : min(self.n_sink, n)] = float(n + 1)
        return scores


@register_method("kv", "random", "KV cache: uniform random scores, a baseline (kvpress's RandomPress)")
class RandomKV(KVPolicy):
    _parameter_constraints = {"seed": [None, Interval("int", 0)]}

    def __init__(self, *, seed: int | None = 0):
        self.seed = seed
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n):
        # seeded afresh per call, so every layer of a prefill draws the same scores (as kvpress)
        generator = None if self.seed is None else torch.Generator(device=keys.device).manual_seed(self.seed)
        return torch.rand(keys.shape[:-1], generator=generator, dtype=keys.dtype, device=keys.device)
