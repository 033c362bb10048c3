"""KV-cache policies by the geometry of the cached keys and values themselves: norms,
directions, leverage and capacity (higher = kept; the base in
:mod:`salience.compress.kv.policy`; kvpress's presses of the same names):

* ``key_norm``: a small key norm means a large attention share (Devoto et al., 2024);
* ``keydiff``: tokens whose keys differ most from the layer's average key direction are kept
  (negative cosine to the mean of the unit keys; Park et al., 2025);
* ``lagkv``: the prompt cut into partitions of ``lag_size`` after ``n_sink`` sinks; each
  token is scored by how far its key and value stand out of the *next* partition's range
  (min-max normalised, the spread over channels, softmax within the partition), as its rank
  within the partition; the sinks and the last partition (and the remainder) are kept (Liang
  et al., 2025);
* ``curdkv``: leverage of keys and values approximated by their squared norms, each
  normalised within local windows of ``local_window`` tokens, multiplied (``leverage=
  "kv_product"``), averaged (``"kv_avg"``) or one alone (``"key"``, ``"value"``); the sinks
  are kept (CurDKV, Sengupta et al., 2025; kvpress's CURPress);
* ``leverage``: each key's statistical leverage among the prompt's keys (before their rotation,
  centred), approximated through a Gaussian sketch of ``sketch_dimension`` columns, z-scored:
  keys unlike the others are kept (Compactor's geometry half; kvpress's LeverageScorePress);
* ``compactor``: ``blending`` x leverage + non-causal attention, the first ``sink_size_start``
  and last ``sink_size_end`` tokens kept (Compactor, Chari and Van Durme, 2025; kvpress's
  CompactorPress);
* ``capkv``: each token's capacity share: its value's leverage ``v' A^-1 v`` under ``A = I +
  sum w v v'``, weighted by ``w = exp(tau x cos(key, query anchor))`` (the prompt's mean
  query, rotated by the average of the next ``n_future_positions`` rotations; the sinks left
  out and kept) (CAPKV; kvpress's CapPress).
"""

from __future__ import annotations

import math

import numpy as np

from salience.core.base import register_method
from salience.core.params import Interval, Options
from salience.exceptions import InvalidParameterError
from salience.extras import torch
from salience.compress.kv.attention import NonCausalAttention
from salience.compress.kv.policy import KVNeeds, KVPolicy, _SinksKept, _average_rotation, _group_mean, _rotated, _z_scored

__all__ = ["KeyNorm", "KeyDiff", "LagKV", "CurDKV", "LeverageScore", "Compactor", "CapKV"]


@register_method("kv", "key_norm", "KV cache: small key norm = kept (Devoto et al., 2024)")
class KeyNorm(KVPolicy):
    def _scores(self, keys, values, queries, scaling, n):
        return -torch.linalg.vector_norm(keys, dim=-1, dtype=torch.promote_types(keys.dtype, torch.float32))


@register_method("kv", "keydiff", "KV cache: keys least like the layer's mean key direction kept (KeyDiff, Park et "
                                  "al., 2025)")
class KeyDiff(KVPolicy):
    def _scores(self, keys, values, queries, scaling, n):
        unit = torch.nn.functional.normalize(keys.to(torch.promote_types(keys.dtype, torch.float32)), dim=-1)
        anchor = unit.mean(dim=2, keepdim=True)
        return -torch.nn.functional.cosine_similarity(unit, anchor, dim=-1)


@register_method("kv", "lagkv", "KV cache: keys and values scored against the next partition's range (LagKV, Liang "
                                "et al., 2025)")
class LagKV(KVPolicy):
    _parameter_constraints = {"n_sink": [Interval("int", 0)], "lag_size": [Interval("int", 2)]}

    def __init__(self, *, n_sink: int = 4, lag_size: int = 128):
        self.n_sink, self.lag_size = n_sink, lag_size
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return self.n_sink + self.lag_size, f"the {self.n_sink} sinks and the last partition of {self.lag_size}"

    def _partition_scores(self, states):
        """(b, h, parts, lag, d) -> (b, h, parts - 1, lag): how far each token of a partition
        stands out of the next partition's per-channel range, softmax within the partition."""
        reference, own = states[:, :, 1:], states[:, :, :-1]
        low = reference.min(dim=-2, keepdim=True).values
        high = reference.max(dim=-2, keepdim=True).values
        return ((own - low) / (high - low)).std(dim=-1).softmax(dim=-1)

    def _scores(self, keys, values, queries, scaling, n):
        b, n_kv, _, d = keys.shape
        dtype = torch.promote_types(keys.dtype, torch.float32)
        if n < self.n_sink + 2 * self.lag_size:
            # too short for one scored partition: keep the sinks, then the most recent tokens
            scores = torch.ones(b, n_kv, n, dtype=dtype)
            if n > self.n_sink:
                scores[..., self.n_sink:] = torch.arange(n - self.n_sink, dtype=dtype) / (n - self.n_sink)
            return scores
        parts = (n - self.n_sink) // self.lag_size
        end = self.n_sink + parts * self.lag_size
        shaped = [x[:, :, self.n_sink:end].to(dtype).reshape(b, n_kv, parts, self.lag_size, d) for x in (keys, values)]
        raw = (self._partition_scores(shaped[0]) + self._partition_scores(shaped[1])) / 2
        # the rank within the partition, in [0, 1): the last partition and the remainder score 1
        ranked = raw.argsort(dim=-1).argsort(dim=-1).to(dtype) / self.lag_size
        kept_whole = torch.ones(b, n_kv, n - end + self.lag_size, dtype=dtype)
        sinks = torch.ones(b, n_kv, self.n_sink, dtype=dtype)
        return torch.cat([sinks, ranked.reshape(b, n_kv, -1), kept_whole], dim=-1)


@register_method("kv", "curdkv", "KV cache: key and value leverage by squared norms, normalised in local windows "
                                 "(CurDKV, Sengupta et al., 2025)")
class CurDKV(_SinksKept):
    _parameter_constraints = {"n_sink": [Interval("int", 0)], "leverage": [Options(("kv_product", "kv_avg", "key", "value"))],
                              "local_window": [None, Interval("int", 1)]}

    def __init__(self, *, n_sink: int = 4, leverage: str = "kv_product", local_window: int | None = 16):
        self.n_sink, self.leverage, self.local_window = n_sink, leverage, local_window
        super().__init__()

    def _local(self, squared, n):
        """Each token's share of its window of ``local_window`` (the last window may be shorter)."""
        if self.local_window is None:
            return squared
        b, h, _ = squared.shape
        w = self.local_window
        padded = torch.nn.functional.pad(squared, (0, -n % w)).reshape(b, h, -1, w)
        return (padded / padded.sum(dim=-1, keepdim=True)).reshape(b, h, -1)[..., :n]

    def _scores(self, keys, values, queries, scaling, n):
        dtype = torch.promote_types(keys.dtype, torch.float32)
        k2 = self._local(keys.to(dtype).pow(2).sum(dim=-1), n)
        v2 = self._local(values.to(dtype).pow(2).sum(dim=-1), n)
        scores = {"kv_product": lambda: k2 * v2, "kv_avg": lambda: (k2 + v2) / 2, "key": lambda: k2,
                  "value": lambda: v2}[self.leverage]()
        scores = scores / scores.sum(dim=-1, keepdim=True)
        scores[..., : self.n_sink] = 1.0
        return scores


@register_method("kv", "leverage", "KV cache: each key's statistical leverage among the prompt's keys, through a "
                                   "Gaussian sketch (Compactor's geometry scores, Chari and Van Durme, 2025)")
class LeverageScore(KVPolicy):
    """Leverage of the centred, unrotated keys, ``diag(X (X'X)^-1 X')`` for the keys sketched to
    ``X`` (n x ``sketch_dimension``) by a Gaussian matrix scaled by 1 / sqrt(sketch_dimension),
    z-scored over the layer. The sketch of layer l is drawn from ``seed`` and l, so a prefill is
    repeatable; ``(X'X)`` gets a small jitter until its Cholesky factor exists (1e-2, then
    tenfold)."""

    needs = KVNeeds(reads=("rotary", "layer"))
    _parameter_constraints = {"sketch_dimension": [Interval("int", 1)], "seed": [Interval("int", 0)]}

    def __init__(self, *, sketch_dimension: int = 48, seed: int = 0):
        self.sketch_dimension, self.seed = sketch_dimension, seed
        super().__init__()

    def normals(self, shape, layer: int, dtype):
        """The standard normal draws behind decoder layer ``layer``'s sketch, ``shape`` (b,
        kv_heads, d, sketch_dimension), from ``seed`` and ``layer``."""
        seed = int(np.random.SeedSequence([self.seed, layer]).generate_state(1)[0])
        return torch.randn(shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)

    def sketch(self, shape, layer: int, dtype):
        """Decoder layer ``layer``'s Gaussian sketch: :meth:`normals` x 1 / sqrt(sketch_dimension)."""
        return self.normals(shape, layer, dtype) * (1 / math.sqrt(self.sketch_dimension))

    def _scores(self, keys, values, queries, scaling, n, rotary, layer, positions=None):
        # keys as projected, before their rotation: turned back by their own positions
        plain = _rotated(keys, rotary, -(torch.arange(n) if positions is None else positions))
        b, heads, _, d = keys.shape
        sketched = (plain - plain.mean(dim=-2, keepdim=True)) @ self.sketch((b, heads, d, self.sketch_dimension),
                                                                           layer, keys.dtype)
        sketched = sketched.to(torch.float32)
        gram = sketched.transpose(-1, -2) @ sketched
        gram = (gram + gram.transpose(-1, -2)) / 2
        factor = _cholesky_with_jitter(gram)
        solved = torch.cholesky_solve(sketched.transpose(-1, -2), factor)  # (X'X)^-1 X'
        return _z_scored((sketched * solved.transpose(-1, -2)).sum(dim=-1).clamp_min(0))


def _cholesky_with_jitter(gram, jitter: float = 1e-2, tries: int = 5):
    identity = torch.eye(gram.shape[-1], dtype=gram.dtype)
    for _ in range(tries):
        factor, info = torch.linalg.cholesky_ex(gram + jitter * identity)
        if bool((info == 0).all()):
            return factor
        jitter *= 10
    raise InvalidParameterError(f"the keys' sketched Gram matrix has no Cholesky factor even with jitter {jitter / 10:g}.")


@register_method("kv", "compactor", "KV cache: leverage blended with non-causal chunked attention, sinks at both ends "
                                    "kept (Compactor, Chari and Van Durme, 2025)")
class Compactor(KVPolicy):
    """``blending`` x :class:`LeverageScore` + :class:`NonCausalAttention`, both on the prompt
    without its first ``sink_size_start`` and last ``sink_size_end`` tokens, which are kept;
    ``blending=None``: the share of the prompt evicted (kvpress's default, its compression
    ratio)."""

    needs = KVNeeds(queries="all", reads=("rotary", "layer", "keep"))
    _parameter_constraints = {"sink_size_start": [Interval("int", 0)], "sink_size_end": [Interval("int", 0)],
                              "chunk_size": [Interval("int", 1)], "sketch_dimension": [Interval("int", 1)],
                              "blending": [None, Interval("real", 0)], "seed": [Interval("int", 0)]}

    def __init__(self, *, sink_size_start: int = 8, sink_size_end: int = 4, chunk_size: int = 256,
                 sketch_dimension: int = 48, blending: float | None = None, seed: int = 0):
        self.sink_size_start, self.sink_size_end, self.chunk_size = sink_size_start, sink_size_end, chunk_size
        self.sketch_dimension, self.blending, self.seed = sketch_dimension, blending, seed
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return max(1, self.sink_size_start + self.sink_size_end), (f"the first {self.sink_size_start} and last "
                                                                  f"{self.sink_size_end} tokens")

    def _scores(self, keys, values, queries, scaling, n, rotary, layer, keep):
        left = min(self.sink_size_start, n)
        right = min(self.sink_size_end, n - left)
        if n - left - right < 2:
            raise InvalidParameterError(f"policy {self.name!r}: the prompt ({n} tokens) must hold more than its "
                                        f"{left + right} kept end tokens.")
        middle = slice(left, n - right)
        k, v, q = keys[:, :, middle], values[:, :, middle], queries[:, :, middle]
        geometry = LeverageScore(sketch_dimension=self.sketch_dimension, seed=self.seed)._scores(
            k, v, None, scaling, k.shape[-2], rotary, layer, positions=torch.arange(left, n - right))
        attention = NonCausalAttention(chunk_size=self.chunk_size)._scores(k, v, q, scaling, k.shape[-2])
        blending = (n - keep) / n if self.blending is None else self.blending
        scores = blending * geometry + attention
        return torch.nn.functional.pad(scores, (left, right), value=float(scores.max()) + 1)


@register_method("kv", "capkv", "KV cache: value leverage under query-aligned weights, the capacity each token adds "
                                "(CAPKV; kvpress's CapPress)")
class CapKV(_SinksKept):
    """CAPKV's retention score (see the module docstring), per query head, averaged over the
    group. Keys and the query anchor are compared at unit length (kvpress's reading); the
    weights are shifted by their largest logit per head before the exponential."""

    needs = KVNeeds(queries="all", rotated_queries=False, reads=("rotary",))
    _parameter_constraints = {"tau": [Interval("real", 0)], "n_future_positions": [Interval("int", 1)],
                              "n_sink": [Interval("int", 0)], "epsilon": [Interval("real", 0)]}

    def __init__(self, *, tau: float = 5.0, n_future_positions: int = 512, n_sink: int = 4, epsilon: float = 1e-6):
        self.tau, self.n_future_positions, self.n_sink, self.epsilon = tau, n_future_positions, n_sink, epsilon
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n, rotary):
        self._check_longer_than_sinks(n)
        self._check_every_query(queries, n)
        b, heads, _, d = queries.shape
        groups = heads // keys.shape[1]
        rotation = _average_rotation(rotary, n, self.n_future_positions, d, queries.dtype)
        anchor = (queries[:, :, self.n_sink:] @ rotation.T).mean(dim=2)  # (b, heads, d)
        k = keys[:, :, self.n_sink:].repeat_interleave(groups, dim=1)
        v = values[:, :, self.n_sink:].repeat_interleave(groups, dim=1)
        cosine = torch.einsum("bhd,bhtd->bht", torch.nn.functional.normalize(anchor, dim=-1),
                              torch.nn.functional.normalize(k, dim=-1)).clamp(-1.0, 1.0)
        logits = self.tau * cosine
        weights = torch.exp(logits - logits.amax(dim=-1, keepdim=True))
        weighted = v * torch.sqrt(weights + self.epsilon)[..., None]
        capacity = torch.eye(d, dtype=v.dtype) + weighted.transpose(-1, -2) @ weighted  # (b, heads, d, d)
        columns = v.transpose(-1, -2).to(torch.float32)
        leverage = (columns * torch.linalg.solve(capacity.to(torch.float32), columns)).sum(dim=-2)
        scores = _group_mean(weights * leverage, keys.shape[1])
        return torch.nn.functional.pad(scores, (self.n_sink, 0), value=float(scores.max()) + 1)
