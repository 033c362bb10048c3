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
* ``adakv`` (on another policy, ``press``): a layer's budget spread over its heads by its
  scores, each head keeping a safeguard share (Feng et al., 2024);
* ``criticalkv`` (on another policy, ``press``): half the budget by its scores, the rest by
  score x the L1 norm of the value through the output projection (Feng et al., 2025);
* ``chunkkv`` (on another policy, ``press``): whole chunks of ``chunk_length`` neighbouring
  tokens kept by its scores summed over heads (Liu et al., 2025);
* ``entropy_chunkkv`` (on another policy, ``press``): ChunkKV whose high-scoring chunks with
  spiky scores keep only their best few tokens, the budget freed going to further chunks
  (kvpress's EntropyGatedChunkKVPress);
* ``curdkv``: leverage of keys and values approximated by their squared norms, each
  normalised within local windows of ``local_window`` tokens, multiplied (``leverage=
  "kv_product"``), averaged (``"kv_avg"``) or one alone (``"key"``, ``"value"``); the sinks
  are kept (CurDKV, Sengupta et al., 2025; kvpress's CURPress).
"""

from __future__ import annotations

import numpy as np

from salience.compress.kv_policies import KVPolicy, SnapKV, _group_mean
from salience.core.base import method_of, register_method
from salience.core.masks import lowest_k_mask
from salience.core.params import Interval, Options
from salience.exceptions import InvalidParameterError

__all__ = ["KeyDiff", "LagKV", "ExpectedAttention", "PyramidKV", "AdaKV", "CriticalKV", "ChunkKV",
           "EntropyGatedChunkKV", "CurDKV"]


@register_method("kv", "keydiff", "KV cache: keys least like the layer's mean key direction kept (KeyDiff, Park et "
                                  "al., 2025)")
class KeyDiff(KVPolicy):
    def _scores(self, torch, keys, values, queries, scaling, n):
        unit = torch.nn.functional.normalize(keys.to(torch.promote_types(keys.dtype, torch.float32)), dim=-1)
        anchor = unit.mean(dim=2, keepdim=True)
        return -torch.nn.functional.cosine_similarity(unit, anchor, dim=-1)


@register_method("kv", "curdkv", "KV cache: key and value leverage by squared norms, normalised in local windows "
                                 "(CurDKV, Sengupta et al., 2025)")
class CurDKV(KVPolicy):
    _parameter_constraints = {"n_sink": [Interval("int", 0)], "leverage": [Options(("kv_product", "kv_avg", "key", "value"))],
                              "local_window": [None, Interval("int", 1)]}

    def __init__(self, *, n_sink: int = 4, leverage: str = "kv_product", local_window: int | None = 16):
        self.n_sink, self.leverage, self.local_window = n_sink, leverage, local_window
        super().__init__()

    def protected(self) -> tuple[int, str]:
        return max(1, self.n_sink), f"the {self.n_sink} sinks"

    def _local(self, torch, squared, n):
        """Each token's share of its window of ``local_window`` (the last window may be shorter)."""
        if self.local_window is None:
            return squared
        b, h, _ = squared.shape
        w = self.local_window
        padded = torch.nn.functional.pad(squared, (0, -n % w)).reshape(b, h, -1, w)
        return (padded / padded.sum(dim=-1, keepdim=True)).reshape(b, h, -1)[..., :n]

    def _scores(self, torch, keys, values, queries, scaling, n):
        dtype = torch.promote_types(keys.dtype, torch.float32)
        k2 = self._local(torch, keys.to(dtype).pow(2).sum(dim=-1), n)
        v2 = self._local(torch, values.to(dtype).pow(2).sum(dim=-1), n)
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

    def _partition_scores(self, torch, states):
        """(b, h, parts, lag, d) -> (b, h, parts - 1, lag): how far each token of a partition
        stands out of the next partition's per-channel range, softmax within the partition."""
        reference, own = states[:, :, 1:], states[:, :, :-1]
        low = reference.min(dim=-2, keepdim=True).values
        high = reference.max(dim=-2, keepdim=True).values
        return ((own - low) / (high - low)).std(dim=-1).softmax(dim=-1)

    def _scores(self, torch, keys, values, queries, scaling, n):
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
        raw = (self._partition_scores(torch, shaped[0]) + self._partition_scores(torch, shaped[1])) / 2
        # the rank within the partition, in [0, 1): the last partition and the remainder score 1
        ranked = raw.argsort(dim=-1).argsort(dim=-1).to(dtype) / self.lag_size
        kept_whole = torch.ones(b, n_kv, n - end + self.lag_size, dtype=dtype)
        sinks = torch.ones(b, n_kv, self.n_sink, dtype=dtype)
        return torch.cat([sinks, ranked.reshape(b, n_kv, -1), kept_whole], dim=-1)


@register_method("kv", "expected_attention", "KV cache: attention expected from future queries, times the value's "
                                             "norm (Expected Attention, Devoto et al., 2025)")
class ExpectedAttention(KVPolicy):
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

    def protected(self) -> tuple[int, str]:
        return max(1, self.n_sink), f"the {self.n_sink} sinks"

    def _average_rotation(self, torch, rotary, n: int, d: int, dtype):
        """The rotary rotation averaged over the next ``n_future_positions`` positions, (d, d):
        rotating by it is rotating by each and averaging (the rotation is linear)."""
        cos, sin = rotary(torch.arange(n, n + self.n_future_positions))
        cos, sin = torch.as_tensor(cos, dtype=dtype), torch.as_tensor(sin, dtype=dtype)
        half = d // 2
        # q' = q cos + rotate_half(q) sin, rotate_half(q) = [-q2, q1]: q' = R q with R = diag(cos) + P diag(sin)
        swap = torch.zeros(d, d, dtype=dtype)
        swap[half:, :half] = torch.eye(half, dtype=dtype)
        swap[:half, half:] = -torch.eye(half, dtype=dtype)
        rotations = torch.diag_embed(cos) + swap[None] * sin[:, None, :]
        return rotations.mean(dim=0)

    def _scores(self, torch, keys, values, queries, scaling, n, rotary):
        if n <= self.n_sink:
            raise InvalidParameterError(f"policy {self.name!r}: the prompt ({n} tokens) must be longer than its "
                                        f"{self.n_sink} sinks.")
        if queries.shape[-2] != n:
            raise InvalidParameterError(f"policy {self.name!r} needs every query of the prompt ({n}); got "
                                        f"{queries.shape[-2]}.")
        dtype = torch.promote_types(keys.dtype, torch.float32)
        d = keys.shape[-1]
        observed = queries[:, :, self.n_sink:].to(dtype)
        mean = observed.mean(dim=2)  # (b, heads, d)
        rotation = self._average_rotation(torch, rotary, n, d, dtype)
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


class _OnAnotherPolicy(KVPolicy):
    """A policy that changes how another one's scores are used (kvpress's wrapping presses):
    ``press`` (kvpress's name for it) a registered ``kv`` name (at its defaults) or a
    :class:`KVPolicy`. It reads what that policy reads and always keeps what it keeps."""

    extra_reads: tuple = ()

    def __init__(self, press):
        self.press = press
        self._inner = method_of("kv", press, KVPolicy)
        if isinstance(self._inner, _OnAnotherPolicy):
            raise InvalidParameterError(f"{self.name} wraps a scoring policy, not another wrapper "
                                        f"({self._inner.name}).")
        super().__init__()

    @property
    def queries(self):
        return self._inner.queries

    @property
    def rotated_queries(self):
        return self._inner.rotated_queries

    @property
    def reads(self):
        return tuple(dict.fromkeys(self._inner.reads + self.extra_reads))

    def query_count(self, n_tokens: int) -> int:
        return self._inner.query_count(n_tokens)

    def check_model(self, model) -> None:
        self._inner.check_model(model)

    def protected(self) -> tuple[int, str]:
        return self._inner.protected()

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        return self._inner.layer_keep(keep, n, layer, n_layers)

    def _base_scores(self, torch, keys, values, queries, scaling, n, context):
        return self._inner._scores(torch, keys, values, queries, scaling, n,
                                   **{name: context[name] for name in self._inner.reads})

    def _scores(self, torch, keys, values, queries, scaling, n, **context):
        return self._base_scores(torch, keys, values, queries, scaling, n, context)


@register_method("kv", "adakv", "KV cache: one budget per layer spread over its heads by the base policy's scores, "
                                "each head keeping a safeguard share (AdaKV, Feng et al., 2024)")
class AdaKV(_OnAnotherPolicy):
    """The layer's budget (``keep`` per head times its heads) goes to its best tokens across
    heads, so a head whose attention is concentrated gives room to one whose attention is
    spread; every head first keeps its ``alpha_safeguard`` share of ``keep``. Heads then hold
    different numbers of tokens: the cache is padded to the largest and attention masks the
    padding (:func:`~salience.compress.kv.attend_kept`)."""

    _parameter_constraints = {"alpha_safeguard": [Interval("real", 0, 1)]}

    def __init__(self, *, press="snapkv", alpha_safeguard: float = 0.2):
        self.alpha_safeguard = alpha_safeguard
        super().__init__(press)

    def evicted(self, scores, count: int) -> np.ndarray:
        b, n_kv, n = scores.shape
        keep = n - count
        safe = max(1, int(keep * self.alpha_safeguard)) if self.alpha_safeguard > 0 and keep > 0 else 0
        guarded = scores.copy()
        if safe:
            guarded[~self._inner.evicted(scores, n - safe)] = np.inf  # each head's best `safe` tokens
        return lowest_k_mask(guarded.reshape(b, n_kv * n), n_kv * count).reshape(b, n_kv, n)


@register_method("kv", "criticalkv", "KV cache: the base policy's best half kept, the rest by score x the L1 norm of "
                                     "the value through the output projection (CriticalKV, Feng et al., 2025)")
class CriticalKV(_OnAnotherPolicy):
    """Two stages: the base policy's best ``first_stage_ratio`` of the budget are kept; the
    remaining tokens are scored by ``(base score + epsilon) x ||W_o v||_1``, the size of what
    the token's value adds to the attention output (averaged over the query heads of a
    group)."""

    extra_reads = ("output_weight", "keep")
    _parameter_constraints = {"epsilon": [Interval("real", 0)], "first_stage_ratio": [Interval("real", 0, 1)]}

    def __init__(self, *, press="snapkv", epsilon: float = 1e-4, first_stage_ratio: float = 0.5):
        self.epsilon, self.first_stage_ratio = epsilon, first_stage_ratio
        super().__init__(press)

    def _scores(self, torch, keys, values, queries, scaling, n, **context):
        scores = self._base_scores(torch, keys, values, queries, scaling, n, context)
        weight, keep = context["output_weight"], context["keep"]
        b, n_kv, _, d = values.shape
        first = int(keep * self.first_stage_ratio)
        if self.first_stage_ratio > 0:
            first = max(1, first)
        first_stage = ~self._inner.evicted(scores.double().numpy(), n - first) if first else None
        heads = weight.shape[1] // d
        if weight.shape[1] % d or heads % n_kv:
            raise InvalidParameterError(f"policy {self.name!r}: an output projection of shape {tuple(weight.shape)} "
                                        f"does not match {n_kv} key-value heads of size {d}.")
        dtype = torch.promote_types(scores.dtype, torch.float32)
        per_head = values.to(dtype).repeat_interleave(heads // n_kv, dim=1)  # (b, heads, n, d)
        projected = torch.einsum("bhnd,ehd->bhne", per_head, weight.to(dtype).view(-1, heads, d))
        norm = _group_mean(projected.abs().sum(dim=-1), n_kv)
        scores = (scores.to(dtype) + self.epsilon) * norm
        if first_stage is not None:
            scores[torch.as_tensor(first_stage)] = float("inf")
        return scores


@register_method("kv", "chunkkv", "KV cache: whole chunks of neighbouring tokens kept by the wrapped policy's scores "
                                  "summed over heads (ChunkKV, Liu et al., 2025)")
class ChunkKV(_OnAnotherPolicy):
    """The prompt cut into chunks of ``chunk_length`` (the last may be shorter); a chunk's
    score is the mean over its tokens of the wrapped policy's scores summed over the layer's
    heads; the best ``int(chunks x budget)`` chunks are kept whole, the same in every head,
    so a kept fact keeps its neighbours. The tokens kept follow the chunks, not exactly the
    budget (as kvpress). A prompt shorter than one chunk: the wrapped policy alone."""

    _parameter_constraints = {"chunk_length": [Interval("int", 1)]}

    def __init__(self, *, press="snapkv", chunk_length: int = 20):
        self.chunk_length = chunk_length
        super().__init__(press)

    def evicted(self, scores, count: int) -> np.ndarray:
        b, n_kv, n = scores.shape
        length = self.chunk_length
        complete, rest = divmod(n, length)
        if complete == 0:
            return self._inner.evicted(scores, count)
        summed = scores.sum(axis=1)  # (b, n): over the layer's heads
        chunks = summed[:, : complete * length].reshape(b, complete, length).mean(axis=-1)
        if rest:
            chunks = np.concatenate([chunks, summed[:, complete * length:].mean(axis=-1, keepdims=True)], axis=1)
        n_chunks = chunks.shape[1]
        kept_chunks = max(1, n_chunks * (n - count) // n)
        dropped = lowest_k_mask(chunks, n_chunks - kept_chunks)
        tokens = np.repeat(dropped, length, axis=1)[:, :n]
        return np.broadcast_to(tokens[:, None, :], (b, n_kv, n)).copy()


def _normalised_entropy(scores: np.ndarray) -> np.ndarray:
    """The entropy of each row of ``scores`` (chunks x tokens) as a distribution over its tokens,
    divided by its largest (log tokens), in [0, 1]; a row with a negative score is first moved
    up by its minimum; a one-token row: 0 (kvpress's gate)."""
    tokens = scores.shape[-1]
    if tokens == 1:
        return np.zeros(scores.shape[0])
    shifted = scores - np.minimum(scores.min(axis=-1, keepdims=True), 0.0)
    share = shifted / (shifted.sum(axis=-1, keepdims=True) + _ENTROPY_EPSILON)
    entropy = -(share * np.log(share + _ENTROPY_EPSILON)).sum(axis=-1)
    return np.clip(entropy / np.log(tokens), 0.0, 1.0)


_ENTROPY_EPSILON = 1e-8


@register_method("kv", "entropy_chunkkv", "KV cache: ChunkKV whose important but spiky chunks keep only their best "
                                          "tokens, the budget freed spent on further chunks (kvpress's "
                                          "EntropyGatedChunkKV)")
class EntropyGatedChunkKV(_OnAnotherPolicy):
    """ChunkKV with an entropy gate: chunks of ``chunk_length`` scored by the mean of the
    wrapped policy's scores summed over heads; a chunk at or above the median chunk score whose
    scores are spiky (normalised entropy below the median chunk's) keeps only its
    ``low_entropy_chunk_length`` best tokens, others are kept whole, best chunk first, until
    exactly the budget's tokens are kept (any left over go to the best remaining tokens). The
    same tokens in every head. Medians are the lower middle value (torch's)."""

    _parameter_constraints = {"chunk_length": [Interval("int", 2)], "low_entropy_chunk_length": [Interval("int", 1)]}

    def __init__(self, *, press="snapkv", chunk_length: int = 10, low_entropy_chunk_length: int = 4):
        self.chunk_length, self.low_entropy_chunk_length = chunk_length, low_entropy_chunk_length
        super().__init__(press)

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.low_entropy_chunk_length >= self.chunk_length:
            raise InvalidParameterError(f"low_entropy_chunk_length={self.low_entropy_chunk_length} must be below "
                                        f"chunk_length={self.chunk_length}.")

    def evicted(self, scores, count: int) -> np.ndarray:
        b, n_kv, n = scores.shape
        kept = np.stack([self._kept(row, max(1, n - count)) for row in scores.sum(axis=1)])
        return np.broadcast_to(~kept[:, None, :], (b, n_kv, n)).copy()

    def _kept(self, summed: np.ndarray, budget: int) -> np.ndarray:
        n, length = len(summed), self.chunk_length
        starts = np.arange(0, n, length)
        complete = n // length
        whole = summed[: complete * length].reshape(complete, length)
        chunk_scores, entropy = whole.mean(axis=1), _normalised_entropy(whole) if complete else np.zeros(0)
        if n % length:
            tail = summed[complete * length:]
            chunk_scores = np.append(chunk_scores, tail.mean())
            entropy = np.append(entropy, _normalised_entropy(tail[None])[0])
        lower_median = lambda values: np.sort(values)[(len(values) - 1) // 2]  # noqa: E731
        spiky = (chunk_scores >= lower_median(chunk_scores)) & (entropy < lower_median(entropy))
        kept = np.zeros(n, dtype=bool)
        for chunk in np.argsort(-chunk_scores, kind="stable"):
            if budget <= 0:
                break
            start, end = starts[chunk], min(starts[chunk] + length, n)
            take = min(end - start, budget, self.low_entropy_chunk_length if spiky[chunk] else end - start)
            best = np.argsort(-summed[start:end], kind="stable")[:take]
            kept[start + best] = True
            budget -= take
        if budget > 0:  # the last chunks were cut short: the best tokens left
            rest = np.flatnonzero(~kept)
            kept[rest[np.argsort(-summed[rest], kind="stable")[:budget]]] = True
        return kept


@register_method("kv", "layer_budget", "KV cache: each layer's share of the budget from its importance (block "
                                       "influence or any layer score), over another policy's scores (after "
                                       "SqueezeAttention, Wang et al., 2024)")
class LayerBudget(_OnAnotherPolicy):
    """Per-layer budgets from layer importance: every layer keeps ``floor`` of the uniform
    budget, and the rest of the total (``keep`` x layers, as the uniform budget's) is shared
    in proportion to ``importance`` (one non-negative number per decoder layer, e.g.
    :func:`salience.compress.layers.block_influence`'s scores: a layer that barely turns the
    residual stream needs fewer of its tokens); a layer never keeps more than the prompt,
    its excess goes to the others. ``importance=None``: the uniform budget (the press
    alone). The tokens within a layer: the wrapped policy's."""

    _parameter_constraints = {"floor": [Interval("real", 0, 1)]}

    def __init__(self, *, press="snapkv", importance=None, floor: float = 0.5):
        self.importance, self.floor = importance, floor
        super().__init__(press)

    def _validate_params(self) -> None:
        super()._validate_params()
        if self.importance is None:
            return
        values = np.asarray(getattr(self.importance, "values", self.importance), dtype=float)
        if values.ndim != 1 or values.size == 0 or not np.isfinite(values).all() or (values < 0).any() \
                or values.sum() <= 0:
            raise InvalidParameterError("importance must be one finite, non-negative number per decoder layer, not "
                                        f"all zero; got {values.tolist() if values.size <= 8 else values.shape}.")

    def layer_keep(self, keep: int, n: int, layer: int, n_layers: int) -> int:
        if self.importance is None:
            return self._inner.layer_keep(keep, n, layer, n_layers)
        return int(self.layer_budgets(keep, n, n_layers)[layer])

    def layer_budgets(self, keep: int, n: int, n_layers: int) -> np.ndarray:
        """Every layer's tokens per head: whole numbers summing to ``keep`` x ``n_layers``
        (less where the prompt is too short to hold it), each at least ``floor`` x ``keep`` and
        what the wrapped policy always keeps."""
        weights = np.asarray(getattr(self.importance, "values", self.importance), dtype=float)
        if weights.size != n_layers:
            raise InvalidParameterError(f"importance holds {weights.size} layers; the model has {n_layers} decoder "
                                        "layers.")
        total = min(keep * n_layers, n * n_layers)
        least = min(keep, max(self.floor * keep, self.protected()[0]))
        budgets = np.full(n_layers, least, dtype=float)
        free = np.ones(n_layers, dtype=bool)
        spare = total - budgets.sum()
        while spare > 1e-9 and free.any():  # share the rest by weight; a full layer passes its excess on
            share = weights * free
            share = share / share.sum() if share.sum() > 0 else free / free.sum()
            budgets += spare * share
            full = budgets >= n
            spare = float((budgets[full] - n).sum())
            budgets[full], free = n, free & ~full
        whole = np.floor(budgets).astype(int)
        left = int(round(min(total, budgets.sum()))) - whole.sum()
        whole[np.argsort(-(budgets - whole), kind="stable")[:left]] += 1  # largest remainders
        return np.maximum(whole, 1)
