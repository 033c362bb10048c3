"""Which key channels of the KV cache matter: the ``kv_channels`` family, after ThinK (Xu et
al., 2025; kvpress's ThinKPress). Token policies (:mod:`salience.compress.kv.policy`) shorten
the cache; a channel policy thins its keys, so it composes with any of them
(``evict(model, "snapkv", budget=0.25, key_channels=0.5)``).

* ``think``: channel c of a key/value head scores ``mean_q(q_c^2) x mean_j(k_jc^2)``, the last
  ``window`` queries (with their rotary positions, averaged over the query heads the head
  serves) against every cached key: the channels that contribute least to ``q . k`` are
  pruned. Pruned channels are set to zero in the cached keys, which gives attention exactly
  as if the queries and keys had lost them (kvpress does the same; a kernel reading the
  narrower keys would also save their memory).

Higher = kept; :func:`prune_key_channels` zeroes the lowest of each head.
"""

from __future__ import annotations

import abc

import numpy as np

from salience.compress.kv.policy import _checked_layer, _torch
from salience.core.base import Scorer, method_of, register_method
from salience.core.params import Interval
from salience.core.scores import Scores
from salience.core.masks import lowest_k_mask
from salience.exceptions import InvalidParameterError

__all__ = ["KeyChannelPolicy", "ThinK", "prune_key_channels", "key_channel_policy"]


class KeyChannelPolicy(Scorer, abc.ABC):
    """Base of the ``kv_channels`` family: ``channel_scores(keys, queries)`` gives (b, kv_heads,
    head_dim) scores of one layer's key channels from its cache ``keys`` (b, kv_heads, n, d)
    and the prompt's last :meth:`query_count` queries (b, heads, q, d), rotary positions
    applied; :meth:`score` the same as :class:`~salience.Scores` over ``"head:channel"``."""

    def __init__(self):
        self._validate_params()

    @property
    def name(self) -> str:
        from salience.core.base import registered_name

        return registered_name(self, "kv_channels")

    def query_count(self, n_tokens: int) -> int:
        return min(getattr(self, "window", 1), n_tokens)

    @abc.abstractmethod
    def channel_scores(self, keys, queries):
        """The subclass's part (see the class docstring)."""

    def score(self, keys, queries) -> Scores:
        """Scores of one layer's key channels: keys (kv_heads, n, d), queries (heads, q, d)."""
        torch = _torch()
        k, _, q = _checked_layer(keys, keys, queries)
        if q is None:
            raise InvalidParameterError(f"policy {self.name!r} needs the prompt's queries.")
        out = self.channel_scores(torch.as_tensor(k)[None], torch.as_tensor(q)[None])[0]
        heads, d = out.shape
        return Scores(out.double().numpy().ravel(), ids=[f"{h}:{c}" for h in range(heads) for c in range(d)])

    def score_batch(self, batch) -> list[Scores]:
        return [self.score(keys, queries) for keys, queries in batch]


@register_method("kv_channels", "think", "KV cache key channels: mean squared query x mean squared key per channel; "
                                         "the weakest channels zeroed (ThinK, Xu et al., 2025)")
class ThinK(KeyChannelPolicy):
    _parameter_constraints = {"window": [Interval("int", 1)]}

    def __init__(self, *, window: int = 32):
        self.window = window
        super().__init__()

    def channel_scores(self, keys, queries):
        b, n_kv, _, d = keys.shape
        heads = queries.shape[1]
        if heads % n_kv:
            raise InvalidParameterError(f"queries hold {heads} heads, not a multiple of the keys' {n_kv}.")
        query_energy = queries[:, :, -self.window:].pow(2).mean(dim=2)  # (b, heads, d)
        query_energy = query_energy.view(b, n_kv, heads // n_kv, d).mean(dim=2)
        return query_energy * keys.pow(2).mean(dim=2)


def key_channel_policy(policy: str | KeyChannelPolicy, **params) -> KeyChannelPolicy:
    """A registered ``kv_channels`` policy by name, built with ``params``, or one as it is."""
    return method_of("kv_channels", policy, KeyChannelPolicy, **params)


def check_key_channels(key_channels) -> float:
    """The share of key channels kept: a fraction in (0, 1]."""
    if isinstance(key_channels, bool) or not isinstance(key_channels, (int, float, np.integer, np.floating)) \
            or not np.isfinite(key_channels) or not 0 < key_channels <= 1:
        raise InvalidParameterError(f"key_channels must be the share of key channels kept, in (0, 1]; got "
                                    f"{key_channels!r}.")
    return float(key_channels)


def prune_key_channels(keys, scores, key_channels: float):
    """``keys`` (b, kv_heads, n, d) with each head's lowest-scoring channels (``scores`` (b,
    kv_heads, d)) set to zero, keeping ``key_channels`` of them (kvpress's count: ``int(d x
    (1 - key_channels))`` pruned; the earlier of tied channels first)."""
    torch = _torch()
    b, n_kv, _, d = keys.shape
    pruned = int(d * (1 - check_key_channels(key_channels)) + 1e-9)
    if pruned == 0:
        return keys
    mask = lowest_k_mask(scores.double().numpy().reshape(b * n_kv, d), pruned).reshape(b, n_kv, 1, d)
    return keys.masked_fill(torch.as_tensor(mask), 0.0)
