"""More KV-cache policies of the ``kv`` family, after kvpress's presses of the same names
(higher = kept; see :mod:`salience.compress.kv_policies` for the family and its base).

* ``keydiff``: tokens whose keys differ most from the layer's average key direction are kept
  (negative cosine to the mean of the unit keys; Park et al., 2025);
* ``lagkv``: the prompt cut into partitions of ``lag_size`` after ``n_sink`` sinks; each
  token is scored by how far its key and value stand out of the *next* partition's range
  (min-max normalised, the spread over channels, softmax within the partition), as its rank
  within the partition; the sinks and the last partition (and the remainder) are kept (Liang
  et al., 2025);
* ``expected_attention``: the attention future queries are expected to pay each token: the
  prompt's queries (before their rotation, the ``n_sink`` first left out) summarised by mean
  and covariance, rotated by the average rotation of the next ``n_future_positions``
  positions; ``E[exp(q.k / sqrt d)]`` of a Gaussian query is ``exp(mu.k / sqrt d + k' S k /
  2d)``, normalised over the tokens, averaged over the heads of a group and scaled by the
  value's norm; the sinks are kept (Devoto et al., 2025);
* ``pyramidkv``: SnapKV's scores with a budget per layer falling linearly from the first
  layer to the last (the pyramid's steepness ``beta``), the total as the uniform budget's
  (Cai et al., 2024);
* ``curdkv``: leverage of keys and values approximated by their squared norms, each
  normalised within local windows of ``local_window`` tokens, multiplied (``leverage=
  "kv_product"``), averaged (``"kv_avg"``) or one alone (``"key"``, ``"value"``); the sinks
  are kept (CurDKV, Sengupta et al., 2025; kvpress's CURPress);
* ``non_causal_attention``: the prompt cut into chunks of ``chunk_size`` in which every query
  attends to every key (no causal mask; unscaled dot products, as kvpress); a token's
  attention summed over its chunk's queries, averaged over the group, times its value's norm,
  pooled over 3 neighbours and z-scored (Compactor's attention half, Chari and Van Durme,
  2025; kvpress's NonCausalAttnPress);
* ``leverage``: each key's statistical leverage among the prompt's keys (before their rotation,
  centred), approximated through a Gaussian sketch of ``sketch_dimension`` columns, z-scored:
  keys unlike the others are kept (Compactor's geometry half; kvpress's LeverageScorePress);
* ``compactor``: ``blending`` x leverage + non-causal attention, the first ``sink_size_start``
  and last ``sink_size_end`` tokens kept (Compactor, Chari and Van Durme, 2025; kvpress's
  CompactorPress);
* ``capkv``: each token's capacity share: its value's leverage ``v' A^-1 v`` under ``A = I +
  sum w v v'``, weighted by ``w = exp(tau x cos(key, query anchor))`` (the prompt's mean
  query, rotated by the average of the next ``n_future_positions`` rotations; the sinks left
  out and kept) (CAPKV; kvpress's CapPress);
* ``finch``: query-aware only: the attention the question's queries pay each token of the
  context, each weight times its query's position (``normalize_scores``: later queries spread
  their attention over more keys), averaged; the kept keys rerotated to consecutive
  positions (``rerotate_keys``) (FINCH, Corallo and Papotti, 2024; kvpress's FinchPress).

The policies that change how another one's scores are used (kvpress's wrapping presses:
AdaKV, CriticalKV, ChunkKV, ...) are in :mod:`salience.compress.kv_wrappers`; ``simlayerkv``,
which decides per layer, in :mod:`salience.compress.kv_simlayer`.
"""

from __future__ import annotations

import math

import numpy as np

from salience.compress.kv_policies import (KVPolicy, SnapKV, _group_mean, _rotated,
                                          _window_attention)
from salience.core.base import register_method
from salience.core.params import Interval, Options
from salience.exceptions import InvalidParameterError
from salience.extras import torch

__all__ = ["KeyDiff", "LagKV", "ExpectedAttention", "PyramidKV", "CurDKV", "NonCausalAttention", "LeverageScore",
           "Compactor", "CapKV"]


class _SinksKept(KVPolicy):
    """A policy that always keeps the prompt's first ``n_sink`` tokens (attention sinks)."""

    def protected(self) -> tuple[int, str]:
        return max(1, self.n_sink), f"the {self.n_sink} sinks"

    def _check_longer_than_sinks(self, n: int) -> None:
        if n <= self.n_sink:
            raise InvalidParameterError(f"policy {self.name!r}: the prompt ({n} tokens) must be longer than its "
                                        f"{self.n_sink} sinks.")


@register_method("kv", "keydiff", "KV cache: keys least like the layer's mean key direction kept (KeyDiff, Park et "
                                  "al., 2025)")
class KeyDiff(KVPolicy):
    def _scores(self, keys, values, queries, scaling, n):
        unit = torch.nn.functional.normalize(keys.to(torch.promote_types(keys.dtype, torch.float32)), dim=-1)
        anchor = unit.mean(dim=2, keepdim=True)
        return -torch.nn.functional.cosine_similarity(unit, anchor, dim=-1)


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


def _average_rotation(rotary, start: int, count: int, d: int, dtype):
    """The rotary rotation averaged over the ``count`` positions from ``start``, (d, d):
    rotating by it is rotating by each and averaging (the rotation is linear)."""
    cos, sin = rotary(torch.arange(start, start + count))
    cos, sin = torch.as_tensor(cos, dtype=dtype), torch.as_tensor(sin, dtype=dtype)
    half = d // 2
    # q' = q cos + rotate_half(q) sin, rotate_half(q) = [-q2, q1]: q' = R q with R = diag(cos) + P diag(sin)
    swap = torch.zeros(d, d, dtype=dtype)
    swap[half:, :half] = torch.eye(half, dtype=dtype)
    swap[:half, half:] = -torch.eye(half, dtype=dtype)
    rotations = torch.diag_embed(cos) + swap[None] * sin[:, None, :]
    return rotations.mean(dim=0)


@register_method("kv", "expected_attention", "KV cache: attention expected from future queries, times the value's "
                                             "norm (Expected Attention, Devoto et al., 2025)")
class ExpectedAttention(_SinksKept):
    queries = "all"
    rotated_queries = False
    reads = ("rotary",)
    _parameter_constraints = {"n_future_positions": [Interval("int", 1)], "n_sink": [Interval("int", 0)],
                              "use_covariance": [bool], "use_vnorm": [bool], "epsilon": [Interval("real", 0)]}

    def __init__(self, *, n_future_positions: int = 512, n_sink: int = 4, use_covariance: bool = True,
                 use_vnorm: bool = True, epsilon: float = 0.0):
        self.n_future_positions, self.n_sink = n_future_positions, n_sink
        self.use_covariance, self.use_vnorm, self.epsilon = use_covariance, use_vnorm, epsilon
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n, rotary):
        self._check_longer_than_sinks(n)
        self._check_every_query(queries, n)
        dtype = torch.promote_types(keys.dtype, torch.float32)
        d = keys.shape[-1]
        observed = queries[:, :, self.n_sink:].to(dtype)
        mean = observed.mean(dim=2)  # (b, heads, d)
        rotation = _average_rotation(rotary, n, self.n_future_positions, d, dtype)
        mean = mean @ rotation.T
        k = keys[:, :, self.n_sink:].to(dtype)
        groups = queries.shape[1] // keys.shape[1]
        expanded = k.repeat_interleave(groups, dim=1)  # (b, heads, m, d)
        logits = (expanded @ mean[..., None])[..., 0] / d ** 0.5
        if self.use_covariance:
            centred = observed - observed.mean(dim=2, keepdim=True)
            covariance = centred.transpose(-1, -2) @ centred / observed.shape[2]
            covariance = rotation @ covariance @ rotation.T
            logits = logits + ((expanded @ covariance) * expanded).sum(dim=-1) / d / 2
        scores = _group_mean(torch.softmax(logits, dim=-1), keys.shape[1])
        if self.use_vnorm:
            scores = (scores + self.epsilon) * torch.linalg.vector_norm(values[:, :, self.n_sink:].to(dtype), dim=-1)
        return torch.nn.functional.pad(scores, (self.n_sink, 0), value=float(scores.max()) + 1)


@register_method("kv", "pyramidkv", "KV cache: SnapKV with budgets falling from the first layer to the last "
                                    "(PyramidKV, Cai et al., 2024)")
class PyramidKV(SnapKV):
    _parameter_constraints = {"beta": [Interval("real", 1)]}

    def __init__(self, *, window: int = 64, kernel_size: int = 5, beta: float = 20):
        self.beta = beta
        super().__init__(window=window, kernel_size=kernel_size)

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        """The pyramid: the first layer keeps the most, the last the least, linearly between;
        the layers keep ``keep`` on average (kvpress's formula, after KVCache-Factory). Too
        short a prompt for a pyramid keeps the uniform budget."""
        top = self.window + keep  # what a layer keeps on average
        low = (top - self.window) / self.beta
        high = (top - self.window) * 2 - low
        if high >= n - self.window:
            high = n - self.window
            low = (top - self.window) * 2 - high
        if not (n >= high >= low >= self.window):
            return keep
        step = (high - low) / (n_layers - 1) if n_layers > 1 else 0.0
        return max(1, min(n, round(high - layer * step)))


@register_method("kv", "non_causal_attention", "KV cache: attention within chunks of the prompt, every query to every "
                                               "key, times the value's norm (Compactor's attention scores, Chari and "
                                               "Van Durme, 2025)")
class NonCausalAttention(KVPolicy):
    """Chunked non-causal attention (see the module docstring). The prompt is padded with zero
    queries and keys to a whole number of chunks: a padded query attends evenly to its chunk,
    a padded key takes its share of the last chunk's softmax (kvpress's masking leaves both
    so)."""

    queries = "all"
    _parameter_constraints = {"chunk_size": [Interval("int", 1)]}

    def __init__(self, *, chunk_size: int = 256):
        self.chunk_size = chunk_size
        super().__init__()

    def _scores(self, keys, values, queries, scaling, n):
        self._check_every_query(queries, n)
        b, heads, _, d = queries.shape
        size = self.chunk_size
        padded = -n % size
        q = torch.nn.functional.pad(queries, (0, 0, 0, padded)).view(b, heads, -1, size, d)
        k = torch.nn.functional.pad(keys.repeat_interleave(heads // keys.shape[1], dim=1), (0, 0, 0, padded))
        logits = q @ k.view(b, heads, -1, size, d).transpose(-1, -2)
        received = torch.softmax(logits.to(torch.float32), dim=-1).sum(dim=-2).reshape(b, heads, -1)[..., :n]
        scores = _group_mean(received, keys.shape[1]) * values.norm(dim=-1)
        scores = torch.nn.functional.avg_pool1d(scores, kernel_size=3, padding=1, stride=1)
        return (scores - scores.mean()) / scores.std().clamp_min(1e-6)


def _z_scored(scores):
    return (scores - scores.mean()) / scores.std().clamp_min(1e-6)


@register_method("kv", "leverage", "KV cache: each key's statistical leverage among the prompt's keys, through a "
                                   "Gaussian sketch (Compactor's geometry scores, Chari and Van Durme, 2025)")
class LeverageScore(KVPolicy):
    """Leverage of the centred, unrotated keys, ``diag(X (X'X)^-1 X')`` for the keys sketched to
    ``X`` (n x ``sketch_dimension``) by a Gaussian matrix scaled by 1 / sqrt(sketch_dimension),
    z-scored over the layer. The sketch of layer l is drawn from ``seed`` and l, so a prefill is
    repeatable; ``(X'X)`` gets a small jitter until its Cholesky factor exists (1e-2, then
    tenfold)."""

    reads = ("rotary", "layer")
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

    queries = "all"
    reads = ("rotary", "layer", "keep")
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

    queries = "all"
    rotated_queries = False
    reads = ("rotary",)
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


@register_method("kv", "finch", "KV cache: attention the question's queries pay the context, weighted by each query's "
                                "position; kept keys rerotated (FINCH, Corallo and Papotti, 2024; kvpress's FinchPress)")
class Finch(KVPolicy):
    """Query-aware: the question is read with the prompt (eviction's ``keep_last``) and its
    queries are the observation window, whatever its length. Query i of the question, at
    position p_i, gives each context token its attention weight times p_i when
    ``normalize_scores`` (a later query spreads its attention over more keys); the weights
    are averaged over the question and over the heads of a group, unpooled. The question's
    own tokens are kept. ``rerotate_keys``: the kept keys are turned to consecutive positions
    and the continuation follows them (:class:`~salience.compress.kv_wrappers.KeyRerotation`),
    as FINCH does. ``chunk_length``: the prompt (the question included) is cut into chunks of
    that many tokens and each keeps the budget's share of its own tokens, the best of them
    (FINCH's chunked selection, kvpress's ``chunk_length``): the kept tokens are spread over
    the whole prompt; the chunk holding the question must keep at least the question."""

    queries = "question"
    reads = ("question",)
    needs_question = True
    _parameter_constraints = {"normalize_scores": [bool], "rerotate_keys": [bool],
                              "chunk_length": [None, Interval("int", 1)]}

    def __init__(self, *, normalize_scores: bool = True, rerotate_keys: bool = True, chunk_length: int | None = None):
        self.normalize_scores, self.rerotate_keys, self.chunk_length = normalize_scores, rerotate_keys, chunk_length
        super().__init__()

    def evicted(self, scores, count: int) -> np.ndarray:
        """Without ``chunk_length``, the lowest ``count`` per head of the whole prompt; with it,
        each chunk keeps ``int(its length x kept share)`` (the share ``1 - count / n``; at least
        one), the rest of it evicted lowest first, ties the earlier."""
        if self.chunk_length is None:
            return super().evicted(scores, count)
        values = np.asarray(scores)
        b, n_kv, n = values.shape
        share = (n - count) / n
        out = np.zeros(values.shape, dtype=bool)
        for lo in range(0, n, self.chunk_length):
            chunk = values[..., lo : lo + self.chunk_length]
            width, kept = chunk.shape[-1], max(1, int(chunk.shape[-1] * share))  # at least one, as kvpress
            question = int(np.isposinf(chunk).sum(axis=-1).max())  # the question's tokens are scored +inf
            if question > kept:
                raise InvalidParameterError(
                    f"chunk_length={self.chunk_length}: the chunk of tokens {lo}-{lo + width - 1} keeps {kept} at this "
                    f"budget, fewer than the {question} question tokens in it: raise chunk_length.")
            out[..., lo : lo + width] = super().evicted(chunk, width - kept)
        return out

    @property
    def rerotates(self):
        return bool(self.rerotate_keys)

    def query_count(self, n_tokens: int, question: int = 0) -> int:
        return min(question, n_tokens)

    def _scores(self, keys, values, queries, scaling, n, question):
        w = min(question, queries.shape[-2])
        if not 0 < w < n:
            raise InvalidParameterError(f"policy {self.name!r} needs a question of 1 to {n - 1} tokens read with the "
                                        f"prompt ({n} tokens); got {question}.")
        attention = _window_attention(queries[:, :, -w:], keys, scaling)[..., : n - w]  # (b, heads, w, n - w)
        if self.normalize_scores:
            attention = attention * torch.arange(n - w, n, dtype=attention.dtype)[:, None]
        scores = _group_mean(attention.mean(dim=2), keys.shape[1])
        return torch.nn.functional.pad(scores, (0, w), value=float(scores.max()) + 1)
