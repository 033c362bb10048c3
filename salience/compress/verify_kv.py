"""The ``kv`` verifier: did the cached tokens scored most important matter most to what the
model reads next?

A context is read into the key/value cache once (the prefill); a set of its tokens is removed by
evicting them from every layer's and head's cache (the rest keep their keys, values and
positions, as :func:`~salience.compress.evict` leaves them), and the outcome is the mean
negative log-likelihood of a continuation read onto what is left (its first token is predicted
by the context's last logits, which no eviction changes, so it is left out). The top-scored
tokens are evicted first, against random orders, up to ``max_fraction`` of the context
(:func:`salience.core.verify.verify`, ``worse="higher"``). Scores are one per context token
(ids the positions): a policy's per-head scores averaged, the attention a token receives, any
token importance. One forward pass of the continuation per distinct set of kept tokens.
"""

from __future__ import annotations

import copy

import numpy as np

from salience.compress.kv.eviction import continue_from, prefill
from salience.core.base import register_method
from salience.core.params import Interval
from salience.core.verify import Verification, Verifier
from salience.exceptions import InvalidParameterError
from salience.extras import require_torch

__all__ = ["KVVerifier"]


@register_method("verify", "kv", "KV-cache tokens: a continuation's NLL as the top-scored context tokens are evicted "
                                 "from every layer's cache, against random orders")
class KVVerifier(Verifier):
    """``max_fraction``: the largest share of the context's tokens evicted."""

    unit = "kv"
    _parameter_constraints = {"max_fraction": [Interval("real", 0, 1, closed="right")]}

    def __init__(self, *, max_fraction: float = 0.9, steps: int = 10, n_random: int = 20, seed: int | None = 0,
                 alpha: float = 0.01):
        self.max_fraction = max_fraction
        super().__init__(steps=steps, n_random=n_random, seed=seed, alpha=alpha)

    def verify(self, scores, *, model, context_ids, continuation_ids) -> Verification:
        """Verify ``scores`` (one per token of ``context_ids``, ids their positions) by the mean
        NLL of ``continuation_ids`` read after the evicted context."""
        torch = require_torch("Verifying KV-cache token importance")
        context = np.asarray(context_ids, dtype=np.int64).ravel()
        continuation = np.asarray(continuation_ids, dtype=np.int64).ravel()
        if len(context) < 2:
            raise InvalidParameterError(f"context_ids hold {len(context)} token(s): at least 2 are needed to evict one.")
        if len(continuation) < 2:
            raise InvalidParameterError(f"continuation_ids hold {len(continuation)} token(s): at least 2 are needed (the "
                                        "first is predicted before any eviction).")
        window = getattr(getattr(model, "config", None), "max_position_embeddings", None)
        if window is not None and len(context) + len(continuation) > window:
            raise InvalidParameterError(f"the context ({len(context)} tokens) and the continuation ({len(continuation)}) "
                                        f"exceed the model's window of {window} tokens.")
        read = prefill(model, context)
        target = torch.as_tensor(continuation[1:])
        passes = [1]

        def outcome(kept: np.ndarray):
            if kept.ndim == 2:  # a batch of sets: one after another
                return np.array([outcome(row) for row in kept])
            cache = copy.deepcopy(read.cache)
            index = torch.as_tensor(np.flatnonzero(kept))
            for layer in cache.layers:
                layer.keys, layer.values = layer.keys[:, :, index], layer.values[:, :, index]
            logits = continue_from(model, cache, continuation, read.length)[0, :-1].double()
            passes[0] += 1
            log_probs = torch.log_softmax(logits, dim=-1).gather(1, target[:, None])[:, 0]
            return float(-log_probs.mean())

        return self._run(scores, outcome, units=[str(i) for i in range(len(context))], worse="higher",
                         max_fraction=self.max_fraction, costs=lambda: {"forward_passes": passes[0]})
